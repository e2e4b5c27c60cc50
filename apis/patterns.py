"""What each `pattern` of the XRDs means, for the one-line error of a value that does not
match it (tests/test_models.py checks every pattern in apis/ has an entry here)."""

from __future__ import annotations

from fleetcache import quantity, shapes

POSITIVE_QUANTITY = r"^([1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
OCI_REFERENCE = f"^{shapes.OCI_REFERENCE.pattern}$"
OCI_REPOSITORY = f"^({shapes.OCI_HOST.pattern})/{shapes.OCI_REPOSITORY.pattern}$"
OCI_PINNED_REFERENCE = f"^({shapes.OCI_HOST.pattern})/{shapes.OCI_REPOSITORY.pattern}@{shapes.OCI_DIGEST.pattern}$"
ENGINE_IMAGE = f"^{shapes.ENGINE_IMAGE.pattern}$"
PATTERN_MEANINGS: dict[str, str] = {
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$":
        "a Kubernetes object name (lowercase letters, digits, '-' and '.', starting and "
        "ending with a letter or digit)",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$":
        "a namespace name (lowercase letters, digits and '-', starting and ending with a "
        "letter or digit)",
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$":
        "a FleetCluster name (lowercase letters, digits, '-' and '.', starting and ending "
        "with a letter or digit)",
    r"^[-._a-zA-Z0-9]+$": "a Secret key (letters, digits, '-', '_' and '.')",
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$":
        "a repository id of the shape org/name, e.g. Qwen/Qwen3-0.6B",
    r"^\S+$": "a value without spaces",
    r"^https?://[^\s/?#]+(/[^\s?#]*)?$":
        "an http(s) URL without spaces, query or fragment, e.g. https://huggingface.co",
    r"^[0-9a-f]{40}$": "a full commit hash (40 lowercase hex digits)",
    r"^sha256:[0-9a-f]{64}$": "a registry blob digest, sha256: and 64 lowercase hex digits",
    r"^((s3|oci|vol)-)?[0-9a-f]{40}$": "a resolved commit: 40 lowercase hex digits, after s3-, "
                                       "oci- or vol- for an S3 prefix, an OCI artifact or a "
                                       "volume's manifest file",
    OCI_REFERENCE: "an OCI reference, registry host first, by tag or digest, e.g. "
                   "registry.example.com/models/qwen3:v1",
    OCI_REPOSITORY: "an OCI repository, registry host first, without tag or digest, e.g. "
                    "registry.example.com/fleet-models",
    ENGINE_IMAGE: "an image with its repository, by tag or digest, e.g. "
                  "docker.io/vllm/vllm-openai:v0.11.0 or vllm/vllm-openai:v0.11.0",
    OCI_PINNED_REFERENCE: "an OCI reference pinned by digest, e.g. "
                          "registry.example.com/models/qwen3@sha256:<64 hex>",
    r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$": "an S3 bucket name (3-63 lowercase letters, digits, "
                                           "'.' and '-', starting and ending with a letter or digit)",
    r"^$|^[^/\s]\S*$": "empty or a relative path without spaces (no leading '/')",
    r"^[^/\s]\S*$": "a relative path without spaces (no leading '/')",
    r"^[a-z0-9][-a-z0-9]{0,62}$": "an S3 region, e.g. us-east-1",
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]"
    r"([-A-Za-z0-9_.]*[A-Za-z0-9])?$": "a label key, e.g. gpu or example.com/gpu",
    r"^[^=]+$": "an environment variable name (no '=')",
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$":
        "a label value (letters, digits, '-', '_' and '.', starting and ending with a letter "
        "or digit), e.g. enabled",
    r"^/\S*$": "an HTTP path starting with /, e.g. /health",
    POSITIVE_QUANTITY: "a positive quantity, e.g. 20Gi or 500M (no zero, sign, exponent "
                       "or milli)",
    "^$|" + POSITIVE_QUANTITY: "empty (unlimited) or a positive quantity, e.g. 200Mi",
    quantity.PATTERN: "a Kubernetes quantity, e.g. 8, 500m or 64Gi",
    r"^[1-9][0-9]{0,5}h$": "a whole number of hours, e.g. 72h",
    r"^[0-9]{1,6}[hm]$": "a whole number of hours or minutes, e.g. 1h or 30m",
}
