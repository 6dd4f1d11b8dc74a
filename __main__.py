"""`python -m lorarag ...`: the console script."""

from lorarag.cli import main

main()
