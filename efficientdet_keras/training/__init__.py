"""Training: EfficientDetNetTrain, optimizers and schedules, EMA, callbacks, run setup."""
