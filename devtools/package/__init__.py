"""The release: the Crossplane packages (xpkg) and the OCI images they embed, built and read
back on a machine with no Docker engine and no crossplane CLI (design/packages.md)."""
