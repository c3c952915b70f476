"""Analyses of trained models: recorded dynamics, sparsity, neuron graphs. Analysis reads models; it never trains."""
