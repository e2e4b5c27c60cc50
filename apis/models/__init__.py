"""Typed models of the fleetcache APIs, generated from the XRDs by fleetcache.devtools.apigen.

Do not edit: edit apis/<plural>/definition.yaml and run `make models`.
"""
