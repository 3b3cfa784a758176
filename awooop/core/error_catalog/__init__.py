"""The error catalog, one module per family; :mod:`awooop.core.errors` is where callers import
it from."""
