"""The host-neutral SharedOS kernel port. Imports NO redis and NO arq."""
