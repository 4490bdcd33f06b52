"""Integration tests: a package, so test module names may repeat those in tests/unit."""
