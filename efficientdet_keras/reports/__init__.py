"""What a training run leaves for people to read: results.csv, plots, precision-recall curves,
the confusion matrix, evaluation images, and the MLflow run they are uploaded to. Files only:
the Keras callbacks that write them during training are in training.callbacks."""
