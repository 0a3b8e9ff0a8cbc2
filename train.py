"""Train with corral: ``python train.py key=value ...`` (Hydra overrides; ``--help`` lists the options)."""

from corral.framework.entry import main

if __name__ == "__main__":
    main()
