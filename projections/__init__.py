# This folder's modules are awooop.projections (awooop/projections links to it). Imported by the
# folder's name as well (possible from the checkout's top), each module would be loaded twice,
# as two modules with their own state: that name is refused.
if __name__ != "awooop.projections":
    raise ImportError(f"import awooop.projections, not {__name__} ({__file__})")
