"""The largest image the package decodes, so that a file whose header claims a huge size (a
decompression bomb, or a scan that needs tiling) is refused before its pixels are allocated."""

# Pillow's own refusal threshold (twice its DecompressionBombWarning level): about 179 million
# pixels, 537 MB as 8-bit RGB. Aerial and whole-slide images beyond it are tiled for detection
# anyway: a detector sees 512-1536 px.
MAX_IMAGE_PIXELS = 178956970


def oversized_message(height: int, width: int) -> str:
    return ("%d x %d pixels, more than the %s pixels an image may have here (tile or downscale "
            "it)" % (width, height, format(MAX_IMAGE_PIXELS, ",")))
