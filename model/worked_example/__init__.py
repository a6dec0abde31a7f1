"""The article's worked example as a lesson: the article's data and its names for tensors,
the reconstruction of the weights it does not print, the JSON contract, the 67 steps with
each cell's arithmetic, and training the toy live."""
