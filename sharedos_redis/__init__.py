"""sharedos-redis."""
