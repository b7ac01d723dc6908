/* SPDX-License-Identifier: Apache-2.0 */
/*
 * header_test.c - the public header compiles on its own: it is included first, alone, and must
 * bring every type and macro it uses.
 */
#include "odx/odx.h"

int main(void)
{
	return 0;
}
