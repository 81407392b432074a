"""One descriptor per drafting mechanism; the registry is the single source of names."""
