"""A local Hugging Face–compatible hub for tests, the benchmark and the demo.

    with TestHub() as hub:                      # two threads on 127.0.0.1, ephemeral ports
        commit = hub.add_repo("acme/tiny", make_model(150_000_000))
        # fleetcache-agent fetch --endpoint <hub.endpoint> --repo acme/tiny --dest DIR
        hub.add_token("hf_x", repos=("acme/tiny",))   # private/gated repos need a granted token
        hub.inject(Fault("reset", host="cdn", after_bytes=1 << 20))
        hub.bytes_sent("cdn"), hub.requests("hub")    # what went over the wire, with headers

See design/agent.md, "Test hub".
"""

from fleetcache.devtools.testhub.content import (
    BytesContent,
    ConcatContent,
    PatternContent,
    make_model,
    safetensors_content,
)
from fleetcache.devtools.testhub.server import Fault, HubFile, RequestRecord, TestHub

__all__ = [
    "BytesContent", "ConcatContent", "Fault", "HubFile", "PatternContent", "RequestRecord",
    "TestHub", "make_model", "safetensors_content",
]
