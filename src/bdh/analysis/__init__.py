"""Analyses of trained models: recorded dynamics, sparsity, neuron graphs, loss by context position, and ``bdh eval``
(`evaluation`). Analysis reads models; it never trains."""
