"""The registration of every background loop; the framework that runs them is
:mod:`awooop.core.loops`."""
