"""What a training run leaves for people to read: results.csv, plots, evaluation images."""
