"""The parts of a round, one folder per paper: a client schedule or a round plug-in implements
the hooks of ``fedlight.engine.loop.interfaces``, with its helpers beside it. Yours to add
and change: a new paper is a new folder here (named in ``fedlight.catalog`` or through an
entry point), tested by its own tests. A part imports the loop, ``state`` and ``output``,
never another part; the loop imports none (``fedlight.engine.run.assemble`` picks them).
"""
