"""`python3 -m kvcalc ...`: the same command as the `kvcalc` console script (from a checkout without installing)."""

from .cli import main

if __name__ == "__main__":
    main()
