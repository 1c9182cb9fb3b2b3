/* Kiln's <assert.h> for NVRTC, which defines assert() itself.
 * Written for Kiln (MIT OR Apache-2.0). */
