/* Kiln's <stdio.h> for NVRTC, which declares the device printf itself.
 * Written for Kiln (MIT OR Apache-2.0). */
