/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy_harness.c - runs a policy's Lua test (policies/NAME.test.lua) against the policy,
 * through the same host the runtime uses (docs/policies.md, "Testing a policy").
 *
 *   test_policy_harness POLICY TEST.lua
 *
 * POLICY is lua:NAME (embedded) or a path. Exits 0 when the test file ran to its end.
 */
#include <stdio.h>

#include "core.h"
#include "policy.h"

int main(int argc, char **argv)
{
	char err[4096];

	if (argc != 3) {
		fprintf(stderr, "usage: %s POLICY TEST.lua\n", argv[0]);
		return 2;
	}
	if (odx__policy_test_run(argv[1], argv[2], err, sizeof(err)) != 0) {
		fprintf(stderr, "FAIL %s on %s:\n%s\n", argv[2], argv[1], err);
		return 1;
	}
	printf("ok %s on %s\n", argv[2], argv[1]);
	return 0;
}
