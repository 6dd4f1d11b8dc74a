"""`python -m lorarag.cli ...`: the console script."""

from lorarag.cli import main

main()
