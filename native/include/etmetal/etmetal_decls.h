/* Shared preamble of the etmetal public headers.
 *
 * Conventions (SQLite-style): every function returning AOTITorchError returns 0 on success
 * and 1 on failure; after a failure, etmetal_last_error() on the same thread describes it.
 * No function throws or aborts. Handles are opaque and validated: a null, freed or
 * wrong-type handle is an error, not a crash. */
#ifndef ETMETAL_DECLS_H
#define ETMETAL_DECLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ETMETAL_API __declspec(dllexport)
#else
#define ETMETAL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#define ETMETAL_BEGIN_DECLS extern "C" {
#define ETMETAL_END_DECLS }
#else
#define ETMETAL_BEGIN_DECLS
#define ETMETAL_END_DECLS
#endif

#endif
