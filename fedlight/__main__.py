from fedlight.cli import run

run()
