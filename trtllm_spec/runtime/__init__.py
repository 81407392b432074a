"""PyTorch execution: the reference speculative decoder and the hardware probe. Imports torch."""
