/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda_stub.c - the CUDA backend given the CUDA toolkit's own stub library
 * (lib64/stubs/libcuda.so, what a build links against on a machine without a driver) as its
 * driver: the backend must refuse it with CUDA_ERROR_STUB_LIBRARY named, and under
 * backends = auto the context opens anyway with the reason kept. No driver and no GPU are
 * involved: this is NVIDIA's real stub, not a fake.
 *
 * usage: test_cuda_stub [STUB_LIBRARY]   (default: $CUDA_HOME or /usr/local/cuda,
 *   lib64/stubs/libcuda.so). Exits 77 (skipped) when no stub library is found.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "odx/odx.h"

static int failures;

static void check(const char *what, int ok, const char *detail)
{
	printf("%s: %s%s%s\n", ok ? "ok" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
	failures += !ok;
}

/* odx_open with `backends` and cuda.library = stub; the code, the config's error in err. */
static int open_with(const char *backends, const char *stub, odx_context **ctx, char *err, size_t n)
{
	odx_config *cfg = NULL;
	int rc;

	if (odx_config_create(&cfg) || odx_config_set(cfg, "backends", backends) ||
	    odx_config_set(cfg, "cuda.library", stub)) {
		fprintf(stderr, "cannot configure\n");
		exit(1);
	}
	rc = odx_open(ctx, cfg);
	snprintf(err, n, "%s", odx_config_error(cfg));
	odx_config_destroy(cfg);
	return rc;
}

int main(int argc, char **argv)
{
	const char *home = getenv("CUDA_HOME");
	char stub[512], err[1024];
	odx_context *ctx = NULL;
	odx_backend_info info;
	int i, rc, found = 0;

	if (argc > 1)
		snprintf(stub, sizeof(stub), "%s", argv[1]);
	else
		snprintf(stub, sizeof(stub), "%s/lib64/stubs/libcuda.so",
			 home && home[0] ? home : "/usr/local/cuda");
	if (access(stub, R_OK) != 0) {
		printf("SKIP: no CUDA toolkit stub library at %s\n", stub);
		return 77;
	}

	rc = open_with("cuda", stub, &ctx, err, sizeof(err));
	check("backends = cuda is refused with ODX_EUNAVAIL", rc == ODX_EUNAVAIL, odx_err_name(rc));
	check("the reason names CUDA_ERROR_STUB_LIBRARY (34)",
	      strstr(err, "CUDA_ERROR_STUB_LIBRARY (34)") != NULL, err);
	check("the reason says what to do", strstr(err, "stub library was loaded instead") != NULL,
	      err);
	if (rc == 0)
		odx_close(ctx);

	ctx = NULL;
	rc = open_with("auto", stub, &ctx, err, sizeof(err));
	check("backends = auto still opens", rc == 0, rc ? err : NULL);
	if (rc == 0) {
		check("with a device", odx_device_count(ctx) >= 1, NULL);
		for (i = 0; i < odx_backend_count(ctx); i++) {
			if (odx_backend_get_info(ctx, i, &info) != 0 || strcmp(info.name, "cuda"))
				continue;
			found = 1;
			check("odx info lists cuda as unavailable", !info.available, NULL);
			check("with the stub as the reason",
			      info.reason && strstr(info.reason, "CUDA_ERROR_STUB_LIBRARY") != NULL,
			      info.reason);
		}
		check("cuda is listed", found, NULL);
		check("close", odx_close(ctx) == 0, NULL);
	}
	printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
	return failures ? 1 : 0;
}
