"""Crossplane composition functions: the gRPC edge, one composer per kind, and below them the
views, decisions and Kubernetes objects they share (design/layout.md, layer 3a)."""
