/* Kiln's <stdlib.h> for NVRTC, which declares the device malloc, free and
 * abs itself. Written for Kiln (MIT OR Apache-2.0). */
#ifndef KILN_NVRTC_STDLIB_H
#define KILN_NVRTC_STDLIB_H
#include <stddef.h>
#endif
