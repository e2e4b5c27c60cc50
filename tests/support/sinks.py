"""A progress sink that keeps every record, for tests of what the agent reports."""


class ListSink:
    """Keeps every record emitted, in order."""

    def __init__(self):
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def close(self):
        pass
