"""Analyses of trained models (dynamics, sparsity, neuron graphs, loss by position, ``bdh eval``); never training."""
