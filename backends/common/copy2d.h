/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy2d.h - what every backend's copy_2d (backend ABI 1.7, odx_backend_copy2d) needs around the
 * vendor's own 2D copy: the request's checks, the span of bytes it reaches on one side, and the
 * strided memcpy of host memory (the host backend's whole copy, and the packing and unpacking of
 * staging memory in the others). Header-only, like the ABI it serves.
 */
#ifndef ODX_BACKENDS_COMMON_COPY2D_H
#define ODX_BACKENDS_COMMON_COPY2D_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "odx/backend.h"

/* Bytes from the first byte of run 0 to the end of the last run: pitch * (rows - 1) + width.
 * False (and *span untouched) when that does not fit in a size_t. */
static inline bool odx__copy2d_span(size_t width, size_t rows, size_t pitch, size_t *span)
{
	size_t s;

	if (rows == 0)
		return false;
	if (__builtin_mul_overflow(pitch, rows - 1, &s) || __builtin_add_overflow(s, width, &s))
		return false;
	*span = s;
	return true;
}

/* 0 when `c` is a copy the ABI allows (rows >= 1, each pitch >= width, each side's span and
 * offset + span representable), ODX_EINVAL otherwise. Says nothing about the memory's size. */
static inline int odx__copy2d_check(const odx_backend_copy2d *c)
{
	size_t span, end;

	if (!c || c->rows == 0 || c->dst_pitch < c->width || c->src_pitch < c->width)
		return ODX_EINVAL;
	if (!odx__copy2d_span(c->width, c->rows, c->dst_pitch, &span) ||
	    __builtin_add_overflow(span, c->dst_host ? 0 : c->dst_off, &end))
		return ODX_EINVAL;
	if (!odx__copy2d_span(c->width, c->rows, c->src_pitch, &span) ||
	    __builtin_add_overflow(span, c->src_host ? 0 : c->src_off, &end))
		return ODX_EINVAL;
	return 0;
}

/* `rows` runs of `width` bytes from src (runs src_pitch apart) to dst (dst_pitch apart). One
 * memcpy when both sides are contiguous. */
static inline void odx__copy2d_memcpy(void *dst, size_t dst_pitch, const void *src,
				      size_t src_pitch, size_t width, size_t rows)
{
	char *d = dst;
	const char *s = src;

	if (width == 0)
		return;
	if (dst_pitch == width && src_pitch == width) {
		memcpy(d, s, width * rows);
		return;
	}
	for (size_t r = 0; r < rows; r++)
		memcpy(d + r * dst_pitch, s + r * src_pitch, width);
}

#endif /* ODX_BACKENDS_COMMON_COPY2D_H */
