"""The XRDs, shipped inside the distribution as `fleetcache.apis` so the function image
validates specs against the same definitions the API server serves (see design/api.md)."""
