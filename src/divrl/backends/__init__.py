"""What divrl installs into a trainer's model, explicitly and undone when training ends: the CPU sampling and
log-prob kernels (`divrl.backends.cpu`) and stop strings (`divrl.backends.stop_strings`). Kept empty so that
importing `divrl.backends` stays light."""
