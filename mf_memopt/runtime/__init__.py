"""The runtime: the training launcher, the MindSpore context, the model build and MindFormers' Trainer."""
