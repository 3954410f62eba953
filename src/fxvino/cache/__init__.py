"""The persistent model cache: keys that cannot go stale, the entry format and the store."""
