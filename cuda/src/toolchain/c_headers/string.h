/* Kiln's <string.h> for NVRTC, which declares the device memcpy and memset
 * itself. Written for Kiln (MIT OR Apache-2.0). */
#ifndef KILN_NVRTC_STRING_H
#define KILN_NVRTC_STRING_H
#include <stddef.h>
#endif
