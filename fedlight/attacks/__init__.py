"""Byzantine attacks: what an attacking client sends in place of its honest payload.

``attack.py`` holds the contract (:class:`~fedlight.attacks.attack.Attack`, exported as
``fedlight.Attack``); each other module is one attack, named by ``faults.attack`` through
``fedlight.catalog.ATTACKS`` (other packages add theirs through the entry point
``fedlight.attacks``). Pure tensor math, as the server room is: nothing here imports Lightning,
the engine or the recipe; who attacks, and when, is the faults part's
(``fedlight.engine.parts.faults``).
"""
