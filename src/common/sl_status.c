/* sl_status.c - names and meanings of statuses, from shardload.h's SL_STATUS_LIST; sl_free. */
#include "shardload.h"

#include <stdlib.h>

#define SL_STATUS_NAME_(name, value, meaning) \
    case name:                               \
        return #name;
#define SL_STATUS_MEANING_(name, value, meaning) \
    case name:                                  \
        return meaning;

const char *sl_status_str(sl_status st)
{
    switch (st) { SL_STATUS_LIST(SL_STATUS_NAME_) }
    return "SL_E_UNKNOWN";
}

const char *sl_status_meaning(sl_status st)
{
    switch (st) { SL_STATUS_LIST(SL_STATUS_MEANING_) }
    return "";
}

void sl_free(void *p)
{
    free(p);
}
