"""Detection math shared by training, evaluation and export: anchors and their labeler, losses, post-processing, anchor fitting."""
