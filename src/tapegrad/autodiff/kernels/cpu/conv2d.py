"""Which compiled kernel serves a 2-d convolution the image-by-image layout takes
(``primitives/conv_layout.by_image``): Winograd's F(2x2, 3x3) for the 3x3 stride-1 float32
layers from 32 channels (``winograd.py``) whose images fit its chunks' buffers, where its
operands are finite; the register-blocked direct sums of ``direct.py`` for the other float32
layers they take, on a CPU with 512-bit vectors (the forward and the stride-1 input gradient
where the rows they write are long enough to fill the blocks, the weight gradient at any
stride); the image-by-image products of ``by_image.py`` for every other one. Each
``conv_image_*`` function has ``by_image``'s signature. Few-channel layers (``conv_few_*``)
and 1-d rows of a channels-last input (``conv_rows_forward``) try the direct kernels too.
"""

from __future__ import annotations

from . import by_image, direct, few_channels, winograd


def _winograd(dtype, w_shape, stride, dilation, out_shape) -> bool:
    """Winograd's kernels take this call (a 3x3 stride-1 float32 kind, an image that fits)."""
    return winograd.applies(dtype, w_shape, stride, dilation, 1) and winograd.fits(
        out_shape, max(w_shape[:2])
    )


def conv_image_forward(x, w, res, stride, padding, dilation, scratch=None) -> None:
    """``res`` (N, O, OH, OW, C-contiguous) <- conv(x, w)."""
    if _winograd(x.dtype, w.shape, stride, dilation, res.shape[2:]):
        if winograd.wino_forward(x, w, res, padding, scratch):
            return
    elif direct.applies(x.dtype, 1) and direct.rows_pay(res.shape[3], w.shape, stride):
        if direct.direct_forward(x, w, res, stride, padding, dilation, scratch):
            return
    by_image.conv_image_forward(x, w, res, stride, padding, dilation, scratch)


def conv_image_input(g, w, gx, stride, padding, dilation, scratch=None) -> None:
    """``gx`` (N, C, H, W, C-contiguous) <- the adjoint of conv in x applied to g."""
    if _winograd(g.dtype, w.shape, stride, dilation, gx.shape[2:]):
        if winograd.wino_input(g, w, gx, padding, scratch):
            return
    elif direct.applies(g.dtype, 1) and direct.rows_pay(gx.shape[3], w.shape, (1, 1)):
        if direct.direct_input(g, w, gx, stride, padding, dilation, scratch):
            return
    by_image.conv_image_input(g, w, gx, stride, padding, dilation, scratch)


def conv_image_weight(x, g, gw, stride, padding, dilation, scratch=None) -> None:
    """``gw`` (O, C, KH, KW, C-contiguous) <- the weight's gradient of conv(x, w) for g."""
    if _winograd(x.dtype, gw.shape, stride, dilation, g.shape[2:]):
        if winograd.wino_weight(x, g, gw, padding, scratch):
            return
    elif direct.applies(x.dtype, 1):
        if direct.direct_weight(x, g, gw, stride, padding, dilation, scratch):
            return
    by_image.conv_image_weight(x, g, gw, stride, padding, dilation, scratch)


def conv_few_forward(x, w, res, padding, scratch=None) -> None:
    """``res`` <- conv(x, w) at stride 1 for few input channels (``few_channels.py``'s kind):
    the direct blocks where they take the call, else ``few_channels.py``'s loops."""
    if direct.applies(x.dtype, 1) and direct.rows_pay(res.shape[3], w.shape, (1, 1)):
        if direct.direct_forward(x, w, res, (1, 1), padding, (1, 1), scratch):
            return
    few_channels.conv_few_forward(x, w, res, padding, scratch)


def conv_few_weight(x, g, gw, padding, scratch=None) -> None:
    """``gw`` <- the weight's gradient at stride 1 for few input channels: the direct kernels'
    blocks or dot products where they take the call, else ``few_channels.py``'s loops."""
    if direct.applies(x.dtype, 1):
        if direct.direct_weight(x, g, gw, (1, 1), padding, (1, 1), scratch):
            return
    few_channels.conv_few_weight(x, g, gw, padding, scratch)


def conv_rows_forward(x, w, res, scratch=None) -> bool:
    """``res`` (N, O, L') <- the 1-d stride-1 unpadded convolution of x (N, C, L), any layout,
    with w (O, C, K) as the direct blocks of an image one row high, where they take it;
    False (``res`` untouched) elsewhere, for the caller's own products."""
    return direct.direct_rows(x, w, res, scratch) if direct.AVAILABLE else False
