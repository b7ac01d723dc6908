/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spirv.c - a small SPIR-V reader: header and instruction-length checks, the compute entry point
 * and the argument interface (see spirv.h). It reads only the few instructions that describe
 * interface variables; everything else is skipped by its word count.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spirv.h"

#define SPV_MAGIC 0x07230203u
#define SPV_MAX_BOUND (1u << 22) /* ids; far above any real kernel, bounds our tables */

/* Opcodes, storage classes and decorations from the SPIR-V specification, section 3. */
enum {
	OP_ENTRY_POINT = 15,
	OP_TYPE_INT = 21,
	OP_TYPE_FLOAT = 22,
	OP_TYPE_STRUCT = 30,
	OP_TYPE_POINTER = 32,
	OP_SPEC_CONSTANT = 50,
	OP_VARIABLE = 59,
	OP_DECORATE = 71,
	OP_MEMBER_DECORATE = 72,
	MODEL_GL_COMPUTE = 5,
	SC_UNIFORM = 2,
	SC_PUSH_CONSTANT = 9,
	SC_STORAGE_BUFFER = 12,
	DEC_SPEC_ID = 1,
	DEC_BLOCK = 2,
	DEC_BUFFER_BLOCK = 3,
	DEC_BINDING = 33,
	DEC_DESCRIPTOR_SET = 34,
	DEC_OFFSET = 35,
};

/* What pass one learns about each id. */
typedef struct spv_id {
	uint16_t op;       /* defining opcode (types and variables only) */
	uint32_t a, b;     /* int/float: width, -; pointer: storage class, pointee; var: type, sc */
	uint32_t members;  /* struct: word index of its first member type */
	uint16_t nmembers;
	int32_t binding, set; /* -1 when not decorated */
	bool buffer_block;
} spv_id;

typedef struct spv_reader {
	const uint32_t *w;
	size_t nwords;
	uint32_t version, bound;
	spv_id *ids;
	char *err;
	size_t err_size;
	uint32_t loop_kernel_id; /* the id decorated SpecId VKB_SPIRV_LOOP_KERNEL_SPEC_ID, or 0 */
	uint32_t loop_kernel;    /* that spec constant's default value, or 0 */
} spv_reader;

static int spv_fail(spv_reader *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int spv_fail(spv_reader *r, const char *fmt, ...)
{
	char text[192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->err_size, "invalid SPIR-V: %s", text);
	return ODX_EINVAL;
}

/* Pass one: every instruction's length, the entry point, types, variables, decorations. */
static int spv_scan(spv_reader *r, const char *entry, size_t *entry_at)
{
	size_t i = 5;
	bool any_compute = false;

	while (i < r->nwords) {
		uint32_t len = r->w[i] >> 16, op = r->w[i] & 0xffff;
		const uint32_t *o = &r->w[i + 1];
		spv_id *id;

		if (len == 0 || i + len > r->nwords)
			return spv_fail(r, "instruction at word %zu runs past the end", i);
		/* Results are bounds-checked once here so the cases below index safely. */
		if ((op == OP_TYPE_INT || op == OP_TYPE_FLOAT || op == OP_TYPE_STRUCT ||
		     op == OP_TYPE_POINTER) && (len < 2 || o[0] >= r->bound))
			return spv_fail(r, "bad type id at word %zu", i);
		switch (op) {
		case OP_ENTRY_POINT:
			if (len < 4)
				return spv_fail(r, "short OpEntryPoint at word %zu", i);
			if (o[0] != MODEL_GL_COMPUTE)
				break;
			any_compute = true;
			/* The name is a NUL-terminated string packed in the following words. */
			if (strnlen((const char *)&o[2], (len - 3) * 4) < (len - 3) * 4 &&
			    strcmp((const char *)&o[2], entry) == 0)
				*entry_at = i;
			break;
		case OP_TYPE_INT:
		case OP_TYPE_FLOAT:
			r->ids[o[0]] = (spv_id){.op = (uint16_t)op, .a = len > 2 ? o[1] : 0,
						.binding = -1, .set = -1};
			break;
		case OP_TYPE_STRUCT:
			id = &r->ids[o[0]];
			id->op = (uint16_t)op;
			id->members = (uint32_t)(i + 2);
			id->nmembers = (uint16_t)(len - 2);
			break;
		case OP_TYPE_POINTER:
			if (len < 4)
				return spv_fail(r, "short OpTypePointer at word %zu", i);
			r->ids[o[0]].op = (uint16_t)op;
			r->ids[o[0]].a = o[1];
			r->ids[o[0]].b = o[2];
			break;
		case OP_VARIABLE:
			if (len < 4 || o[1] >= r->bound)
				return spv_fail(r, "bad OpVariable at word %zu", i);
			r->ids[o[1]].op = (uint16_t)op;
			r->ids[o[1]].a = o[0];
			r->ids[o[1]].b = o[2];
			break;
		case OP_DECORATE:
			if (len < 3 || o[0] >= r->bound)
				return spv_fail(r, "bad OpDecorate at word %zu", i);
			id = &r->ids[o[0]];
			if (o[1] == DEC_BINDING && len >= 4)
				id->binding = (int32_t)o[2];
			else if (o[1] == DEC_DESCRIPTOR_SET && len >= 4)
				id->set = (int32_t)o[2];
			else if (o[1] == DEC_BUFFER_BLOCK)
				id->buffer_block = true;
			else if (o[1] == DEC_SPEC_ID && len >= 4 &&
				 o[2] == VKB_SPIRV_LOOP_KERNEL_SPEC_ID)
				r->loop_kernel_id = o[0];
			break;
		case OP_SPEC_CONSTANT:
			/* decorations come before constants in a module (SPIR-V 2.4) */
			if (len >= 4 && r->loop_kernel_id != 0 && o[1] == r->loop_kernel_id)
				r->loop_kernel = o[2];
			break;
		default:
			break;
		}
		i += len;
	}
	if (*entry_at == 0)
		return spv_fail(r, any_compute ? "no GLCompute entry point named '%s'"
					       : "no GLCompute entry point at all (wanted '%s')",
				entry);
	return 0;
}

/* SPIR-V 1.4 and later list every global the entry point uses; older ones only inputs and
 * outputs, so there every variable of the module counts. */
static bool spv_used(const spv_reader *r, size_t entry_at, uint32_t var)
{
	uint32_t len = r->w[entry_at] >> 16, k;
	size_t name_words;

	if (r->version < 0x00010400)
		return true;
	name_words = strlen((const char *)&r->w[entry_at + 3]) / 4 + 1;
	for (k = (uint32_t)(3 + name_words); k < len; k++)
		if (r->w[entry_at + k] == var)
			return true;
	return false;
}

static int spv_member_kind(spv_reader *r, uint32_t type, odx_arg_kind *kind)
{
	const spv_id *t = type < r->bound ? &r->ids[type] : NULL;

	if (t && t->op == OP_TYPE_INT && (t->a == 32 || t->a == 64))
		*kind = t->a == 32 ? ODX_ARG_I32 : ODX_ARG_I64;
	else if (t && t->op == OP_TYPE_FLOAT && (t->a == 32 || t->a == 64))
		*kind = t->a == 32 ? ODX_ARG_F32 : ODX_ARG_F64;
	else
		return ODX_EINVAL;
	return 0;
}

/* The push-constant block: member kinds from the struct type, offsets from its decorations. */
static int spv_push_block(spv_reader *r, uint32_t st, vkb_spirv_iface *iface)
{
	const spv_id *s = &r->ids[st];
	size_t i = 5;
	int m;

	if (s->op != OP_TYPE_STRUCT || s->nmembers > VKB_SPIRV_MAX_MEMBERS)
		return spv_fail(r, "the push-constant block is not a struct of at most %d members",
				VKB_SPIRV_MAX_MEMBERS);
	iface->push_members = s->nmembers;
	for (m = 0; m < s->nmembers; m++) {
		if (spv_member_kind(r, r->w[s->members + m], &iface->member_kind[m]))
			return spv_fail(r, "push-constant member %d is not an i32, i64, f32 or f64",
					m);
		iface->member_offset[m] = UINT32_MAX;
	}
	while (i < r->nwords) {
		uint32_t len = r->w[i] >> 16;

		if ((r->w[i] & 0xffff) == OP_MEMBER_DECORATE && len >= 5 && r->w[i + 1] == st &&
		    r->w[i + 3] == DEC_OFFSET && r->w[i + 2] < s->nmembers)
			iface->member_offset[r->w[i + 2]] = r->w[i + 4];
		i += len;
	}
	return 0;
}

/* One interface variable: a storage buffer of set 0, or the push-constant block. */
static int spv_variable(spv_reader *r, uint32_t v, vkb_spirv_iface *iface)
{
	const spv_id *var = &r->ids[v], *ptr, *pointee;
	uint32_t sc = var->b;

	if (sc != SC_UNIFORM && sc != SC_STORAGE_BUFFER && sc != SC_PUSH_CONSTANT)
		return 0;
	ptr = var->a < r->bound ? &r->ids[var->a] : NULL;
	if (!ptr || ptr->op != OP_TYPE_POINTER || ptr->b >= r->bound)
		return spv_fail(r, "variable %%%u has no pointer type", v);
	if (sc == SC_PUSH_CONSTANT)
		return spv_push_block(r, ptr->b, iface);
	pointee = &r->ids[ptr->b];
	if (pointee->op != OP_TYPE_STRUCT)
		return spv_fail(r, "buffer variable %%%u is an array of descriptors (unsupported)",
				v);
	/* ODX binds storage buffers only: a uniform block would not match the layout. */
	if (sc == SC_UNIFORM && !pointee->buffer_block)
		return spv_fail(r, "binding %d is a uniform buffer; ODX binds storage buffers",
				var->binding);
	if (var->set != 0)
		return spv_fail(r, "a buffer uses descriptor set %d; ODX binds set 0 only",
				var->set);
	if (var->binding < 0 || var->binding >= VKB_SPIRV_MAX_BINDINGS)
		return spv_fail(r, "buffer binding %d is out of range", var->binding);
	iface->bindings |= 1ull << var->binding;
	return 0;
}

int vkb_spirv_inspect(const void *code, size_t size, const char *entry, vkb_spirv_iface *iface,
		      char *err, size_t err_size)
{
	spv_reader r = {.w = code, .nwords = size / 4, .err = err, .err_size = err_size};
	size_t entry_at = 0;
	uint32_t v;
	int rc;

	if (size % 4 != 0 || size < 20)
		return spv_fail(&r, "size %zu is not a whole number of words past the header",
				size);
	if (r.w[0] != SPV_MAGIC)
		return spv_fail(&r, "bad magic number 0x%08x (want 0x07230203)", r.w[0]);
	r.version = r.w[1];
	r.bound = r.w[3];
	if (r.bound == 0 || r.bound > SPV_MAX_BOUND)
		return spv_fail(&r, "id bound %u is out of range", r.bound);
	r.ids = calloc(r.bound, sizeof(*r.ids));
	if (!r.ids) {
		snprintf(err, err_size, "out of memory reading SPIR-V");
		return ODX_ENOMEM;
	}
	for (v = 0; v < r.bound; v++)
		r.ids[v].binding = r.ids[v].set = -1;
	*iface = (vkb_spirv_iface){.push_members = -1};
	rc = spv_scan(&r, entry, &entry_at);
	for (v = 1; rc == 0 && v < r.bound; v++)
		if (r.ids[v].op == OP_VARIABLE && spv_used(&r, entry_at, v))
			rc = spv_variable(&r, v, iface);
	iface->loop_kernel = r.loop_kernel;
	free(r.ids);
	return rc;
}
