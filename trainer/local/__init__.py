"""The single-process trainer of `arborl train` (`trainer.Trainer`, configured by `config.TrainConfig`)."""
