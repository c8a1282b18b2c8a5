"""What a training run leaves for people to read: results.csv, plots, evaluation images,
and the MLflow tracker that logs them."""
