"""From a recipe to a run folder, the edge of the engine: ``fedlight fit`` (``fit``), the
torch-free first look (``preflight``), the recipe's checks (``recipe_checks``) and each part's
options (``part_options``), the run folder (``run_folder``), the local-rank launcher
(``launch``) and ``assemble``, the last place that reads the recipe. Change it
with the command-line and run-folder tests; nothing else in the engine imports it.
"""
