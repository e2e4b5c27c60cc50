"""Crossplane composition functions: one composer module per kind, and the shared kit."""
