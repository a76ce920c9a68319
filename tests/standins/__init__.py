"""Small stand-ins for legacy executors and business callbacks, for loopback tests."""
