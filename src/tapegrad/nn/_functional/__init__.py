"""The families of :mod:`tapegrad.nn.functional` that live in files of their own
(normalisation, pooling and resizing, attention, losses); ``nn.functional`` re-exports them.

Every function here composes engine operations (``tapegrad.ops``), so it is differentiable,
twice where its parts are, and replays under ``tg.compile`` like any other code: values that
depend on the data flow through tapegrad operations, and only shape-derived arrays (pooling
windows, interpolation indices and weights, masks of a fixed shape) are computed with NumPy.
"""
