/*
 * internal.h — every internal header of the host runtime at once, for the
 * tests and tools that look inside the library. The library's own files
 * include the headers they use (host/core, problem, plan, run, model).
 */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include "common.h"
#include "context.h"
#include "file.h"
#include "tuning.h"
#include "errors.h"
#include "resources.h"
#include "args.h"
#include "program.h"
#include "measure.h"
#include "problem.h"
#include "calls.h"
#include "plan.h"
#include "rules.h"
#include "merge.h"
#include "iomodel.h"
#include "families.h"
#include "naive.h"

#endif
