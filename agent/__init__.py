"""The agent: resolve, fetch and verify model weights; the only code that touches bytes."""
