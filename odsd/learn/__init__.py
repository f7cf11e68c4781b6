"""Reference learner: behavior cloning of the reference MLP on committed expert labels."""

from odsd.learn.bc import BCConfig, masked_bc_loss, train_bc

__all__ = ["BCConfig", "masked_bc_loss", "train_bc"]
