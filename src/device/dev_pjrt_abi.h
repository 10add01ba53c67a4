/* dev_pjrt_abi.h - the part of the PJRT C API (XLA's plugin interface, xla/pjrt/c/pjrt_c_api.h)
 * that the pjrt backend (dev_pjrt*.c) and the tests' stand-in plugin (tests/fake_pjrt*.c) use,
 * declared here from the facts in ../shared/spec/pjrt-notes.md (no header is vendored).
 *
 * A plugin exports `const PJRT_Api *GetPjrtApi(void)`. PJRT_Api is a versioned table: its header
 * (struct_size, extension_start, PJRT_Api_Version) and then one function pointer per slot, slot k
 * at byte 40 + 8k. Every slot takes a pointer to its own Args struct and returns a PJRT_Error *
 * (NULL: success), except Error_Destroy and Error_Message, which return nothing. A slot exists
 * only when it lies inside the plugin's struct_size (and is not NULL): pj_has_slot.
 *
 * Each Args struct starts with its struct_size (set by the caller to PJRT_STRUCT_SIZE: offsetof
 * the last field + its size, which is often less than sizeof) and extension_start (NULL here).
 * A plugin refuses a struct_size smaller than its own, so every struct is declared at the newest
 * layout the notes give (0.114) and never trimmed. Arrays passed by pointer (PJRT_NamedValue[],
 * PJRT_ShapeSpec[]) are indexed with the plugin's sizeof, so those sizes are pinned too.
 *
 * Every offset is pinned with _Static_assert in dev_pjrt_abi_layout.h (x86-64 / aarch64 LP64,
 * from Appendix A of the notes), included at the end, so a transcription error does not compile. bool is C11 _Bool (1 byte); enums travel as
 * int (4 bytes). Buffer_ElementType and Buffer_Dimensions (used by the tests only) are not in the
 * notes' appendix; their layout was checked against the pjrt_c_api.h that the xla-cpu-pjrt 0.0.1
 * wheel ships, outside this tree. */
#ifndef SL_DEV_PJRT_ABI_H
#define SL_DEV_PJRT_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_AsyncHostToDeviceTransferManager PJRT_AsyncHostToDeviceTransferManager;
typedef struct PJRT_Extension_Base PJRT_Extension_Base; /* always passed as NULL */

#define PJRT_STRUCT_SIZE(T, last) (offsetof(T, last) + sizeof(((T *)0)->last))
#define PJRT_ARGS_HEAD          \
    size_t struct_size;         \
    PJRT_Extension_Base *extension_start

/* ---- enums (notes Appendix B; PJRT_Error_Code follows absl::StatusCode) ---------------------- */

enum {
    PJRT_Error_Code_INVALID_ARGUMENT = 3,
    PJRT_Error_Code_NOT_FOUND = 5,
    PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
    PJRT_Error_Code_FAILED_PRECONDITION = 9,
    PJRT_Error_Code_UNIMPLEMENTED = 12,
    PJRT_Error_Code_INTERNAL = 13,
};

enum {
    PJRT_Buffer_Type_INVALID = 0, PJRT_Buffer_Type_PRED = 1, PJRT_Buffer_Type_S8 = 2,
    PJRT_Buffer_Type_S16 = 3, PJRT_Buffer_Type_S32 = 4, PJRT_Buffer_Type_S64 = 5,
    PJRT_Buffer_Type_U8 = 6, PJRT_Buffer_Type_U16 = 7, PJRT_Buffer_Type_U32 = 8,
    PJRT_Buffer_Type_U64 = 9, PJRT_Buffer_Type_F16 = 10, PJRT_Buffer_Type_F32 = 11,
    PJRT_Buffer_Type_F64 = 12, PJRT_Buffer_Type_BF16 = 13, PJRT_Buffer_Type_C64 = 14,
    PJRT_Buffer_Type_F8E5M2 = 16, PJRT_Buffer_Type_F8E4M3FN = 17,
    PJRT_Buffer_Type_F8E5M2FNUZ = 19, PJRT_Buffer_Type_F8E4M3FNUZ = 20,
    PJRT_Buffer_Type_F8E8M0FNU = 28,
};

enum {
    PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
    PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
};

enum { PJRT_NamedValue_kString = 0, PJRT_NamedValue_kInt64 = 1, PJRT_NamedValue_kBool = 4 };

enum { PJRT_Buffer_MemoryLayout_Type_Tiled = 0, PJRT_Buffer_MemoryLayout_Type_Strides = 1 };

/* ---- structs -------------------------------------------------------------------------------- */

typedef struct PJRT_Api_Version {
    PJRT_ARGS_HEAD;
    int major_version;
    int minor_version;
} PJRT_Api_Version;

typedef struct PJRT_Error_Destroy_Args {
    PJRT_ARGS_HEAD;
    PJRT_Error *error;
} PJRT_Error_Destroy_Args;

typedef struct PJRT_Error_Message_Args {
    PJRT_ARGS_HEAD;
    const PJRT_Error *error;
    const char *message;        /* out: lives as long as the error */
    size_t message_size;        /* out */
} PJRT_Error_Message_Args;

typedef struct PJRT_Error_GetCode_Args {
    PJRT_ARGS_HEAD;
    const PJRT_Error *error;
    int code;                   /* out: PJRT_Error_Code */
} PJRT_Error_GetCode_Args;

typedef struct PJRT_NamedValue {
    PJRT_ARGS_HEAD;
    const char *name;
    size_t name_size;
    int type;                   /* PJRT_NamedValue_k* */
    union {
        const char *string_value;
        int64_t int64_value;
        const int64_t *int64_array_value;
        float float_value;
        bool bool_value;
    };
    size_t value_size;          /* characters of a string, 1 for a scalar */
} PJRT_NamedValue;

typedef struct PJRT_Plugin_Initialize_Args {
    PJRT_ARGS_HEAD;
} PJRT_Plugin_Initialize_Args;

/* Event_Destroy, Event_Await and Event_Error take the same fields. */
typedef struct PJRT_Event_Destroy_Args {
    PJRT_ARGS_HEAD;
    PJRT_Event *event;
} PJRT_Event_Destroy_Args;
typedef PJRT_Event_Destroy_Args PJRT_Event_Await_Args;

typedef struct PJRT_Event_IsReady_Args {
    PJRT_ARGS_HEAD;
    PJRT_Event *event;
    bool is_ready;              /* out */
} PJRT_Event_IsReady_Args;

typedef void (*PJRT_Unused_Fn)(void); /* callbacks this backend never sets */

typedef struct PJRT_Client_Create_Args {
    PJRT_ARGS_HEAD;
    const PJRT_NamedValue *create_options;
    size_t num_options;
    PJRT_Unused_Fn kv_get_callback;
    void *kv_get_user_arg;
    PJRT_Unused_Fn kv_put_callback;
    void *kv_put_user_arg;
    PJRT_Client *client;        /* out */
    PJRT_Unused_Fn kv_try_get_callback;
    void *kv_try_get_user_arg;
} PJRT_Client_Create_Args;

typedef struct PJRT_Client_Destroy_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
} PJRT_Client_Destroy_Args;

typedef struct PJRT_Client_PlatformName_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
    const char *platform_name;  /* out: "cpu", "cuda", "tpu" */
    size_t platform_name_size;
} PJRT_Client_PlatformName_Args;

typedef struct PJRT_Client_AddressableDevices_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
    PJRT_Device *const *addressable_devices; /* out: owned by the client */
    size_t num_addressable_devices;
} PJRT_Client_AddressableDevices_Args;

typedef struct PJRT_Buffer_MemoryLayout_Tiled {
    PJRT_ARGS_HEAD;
    const int64_t *minor_to_major;
    size_t minor_to_major_size;
    const int64_t *tile_dims;
    const size_t *tile_dim_sizes;
    size_t num_tiles;
} PJRT_Buffer_MemoryLayout_Tiled;

typedef struct PJRT_Buffer_MemoryLayout_Strides {
    PJRT_ARGS_HEAD;
    const int64_t *byte_strides;
    size_t num_byte_strides;
} PJRT_Buffer_MemoryLayout_Strides;

typedef struct PJRT_Buffer_MemoryLayout {
    PJRT_ARGS_HEAD;
    union {
        PJRT_Buffer_MemoryLayout_Tiled tiled;
        PJRT_Buffer_MemoryLayout_Strides strides;
    };
    int type;                   /* PJRT_Buffer_MemoryLayout_Type_* */
} PJRT_Buffer_MemoryLayout;

typedef struct PJRT_Client_BufferFromHostBuffer_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
    const void *data;
    int type;                   /* PJRT_Buffer_Type */
    const int64_t *dims;
    size_t num_dims;
    const int64_t *byte_strides; /* NULL: dense, major to minor */
    size_t num_byte_strides;
    int host_buffer_semantics;
    PJRT_Device *device;
    PJRT_Memory *memory;        /* NULL: the device's default memory */
    PJRT_Buffer_MemoryLayout *device_layout; /* NULL: the default */
    PJRT_Event *done_with_host_buffer; /* out: always made; the caller destroys it */
    PJRT_Buffer *buffer;        /* out */
} PJRT_Client_BufferFromHostBuffer_Args;

typedef struct PJRT_DeviceDescription_Id_Args {
    PJRT_ARGS_HEAD;
    PJRT_DeviceDescription *device_description;
    int id;                     /* out */
} PJRT_DeviceDescription_Id_Args;

typedef struct PJRT_DeviceDescription_Kind_Args {
    PJRT_ARGS_HEAD;
    PJRT_DeviceDescription *device_description;
    const char *device_kind;    /* out */
    size_t device_kind_size;
} PJRT_DeviceDescription_Kind_Args;

typedef struct PJRT_Device_GetDescription_Args {
    PJRT_ARGS_HEAD;
    PJRT_Device *device;
    PJRT_DeviceDescription *device_description; /* out */
} PJRT_Device_GetDescription_Args;

typedef struct PJRT_Device_DefaultMemory_Args {
    PJRT_ARGS_HEAD;
    PJRT_Device *device;
    PJRT_Memory *memory;        /* out */
} PJRT_Device_DefaultMemory_Args;

/* Every statistic but bytes_in_use is optional: read it only when its _is_set is true. */
typedef struct PJRT_Device_MemoryStats_Args {
    PJRT_ARGS_HEAD;
    PJRT_Device *device;
    int64_t bytes_in_use;
    int64_t peak_bytes_in_use;
    bool peak_bytes_in_use_is_set;
    int64_t num_allocs;
    bool num_allocs_is_set;
    int64_t largest_alloc_size;
    bool largest_alloc_size_is_set;
    int64_t bytes_limit;
    bool bytes_limit_is_set;
    int64_t bytes_reserved;
    bool bytes_reserved_is_set;
    int64_t peak_bytes_reserved;
    bool peak_bytes_reserved_is_set;
    int64_t bytes_reservable_limit;
    bool bytes_reservable_limit_is_set;
    int64_t largest_free_block_bytes;
    bool largest_free_block_bytes_is_set;
    int64_t pool_bytes;
    bool pool_bytes_is_set;
    int64_t peak_pool_bytes;
    bool peak_pool_bytes_is_set;
    int64_t peak_allocated_bytes;
    bool peak_allocated_bytes_is_set;
} PJRT_Device_MemoryStats_Args;

/* Buffer_Destroy takes only the buffer. */
typedef struct PJRT_Buffer_Destroy_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *buffer;
} PJRT_Buffer_Destroy_Args;

typedef struct PJRT_Buffer_ElementType_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *buffer;
    int type;                   /* out: PJRT_Buffer_Type */
} PJRT_Buffer_ElementType_Args;

typedef struct PJRT_Buffer_Dimensions_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *buffer;
    const int64_t *dims;        /* out: owned by the buffer */
    size_t num_dims;
} PJRT_Buffer_Dimensions_Args;

typedef struct PJRT_Buffer_GetMemoryLayout_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *buffer;
    PJRT_Buffer_MemoryLayout layout; /* out, embedded */
} PJRT_Buffer_GetMemoryLayout_Args;

typedef struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *buffer;
    size_t on_device_size_in_bytes; /* out */
} PJRT_Buffer_OnDeviceSizeInBytes_Args;

typedef struct PJRT_Buffer_ToHostBuffer_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *src;
    PJRT_Buffer_MemoryLayout *host_layout; /* NULL: the device layout without its tiles */
    void *dst;                  /* NULL: only the size is asked */
    size_t dst_size;            /* in/out */
    PJRT_Event *event;          /* out */
} PJRT_Buffer_ToHostBuffer_Args;

/* Bytes [offset, offset + transfer_size) of the buffer's on-device representation: the logical
 * row-major bytes only where the layout is dense row-major without tiles (not TPU's). */
typedef struct PJRT_Buffer_CopyRawToHost_Args {
    PJRT_ARGS_HEAD;
    PJRT_Buffer *buffer;
    void *dst;
    int64_t offset;
    int64_t transfer_size;
    PJRT_Event *event;          /* out */
} PJRT_Buffer_CopyRawToHost_Args;

/* Registers host memory with the client (on CUDA, cudaHostRegister) so that transfers from it
 * are DMA'd directly instead of through the plugin's own staging; undone by DmaUnmap. */
typedef struct PJRT_Client_DmaMap_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
    void *data;
    size_t size;
} PJRT_Client_DmaMap_Args;

typedef struct PJRT_Client_DmaUnmap_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
    void *data;
} PJRT_Client_DmaUnmap_Args;

typedef struct PJRT_ShapeSpec {
    PJRT_ARGS_HEAD;
    const int64_t *dims;
    size_t num_dims;
    int element_type;           /* PJRT_Buffer_Type */
} PJRT_ShapeSpec;

typedef struct PJRT_Client_CreateBuffersForAsyncHostToDevice_Args {
    PJRT_ARGS_HEAD;
    PJRT_Client *client;
    PJRT_ShapeSpec *shape_specs;
    size_t num_shape_specs;
    PJRT_Buffer_MemoryLayout **device_layouts; /* optional */
    size_t num_device_layouts;
    PJRT_Memory *memory;        /* required */
    PJRT_AsyncHostToDeviceTransferManager *transfer_manager; /* out */
} PJRT_Client_CreateBuffersForAsyncHostToDevice_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_Destroy_Args {
    PJRT_ARGS_HEAD;
    PJRT_AsyncHostToDeviceTransferManager *transfer_manager;
} PJRT_AsyncHostToDeviceTransferManager_Destroy_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_TransferData_Args {
    PJRT_ARGS_HEAD;
    PJRT_AsyncHostToDeviceTransferManager *transfer_manager;
    int buffer_index;
    const void *data;
    int64_t offset;             /* bytes into the on-device buffer */
    int64_t transfer_size;
    bool is_last_transfer;
    PJRT_Event *done_with_h2d_transfer; /* out: always made */
} PJRT_AsyncHostToDeviceTransferManager_TransferData_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args {
    PJRT_ARGS_HEAD;
    PJRT_AsyncHostToDeviceTransferManager *transfer_manager;
    int buffer_index;
    PJRT_Buffer *buffer_out;    /* out */
} PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args;

/* ---- the table ------------------------------------------------------------------------------ */

#define PJ_SLOT(name, args) PJRT_Error *(*name)(args *a)
#define PJ_RSV(k) PJRT_Unused_Fn rsv_##k

typedef struct PJRT_Api {
    size_t struct_size;
    PJRT_Extension_Base *extension_start;
    PJRT_Api_Version pjrt_api_version;
    void (*Error_Destroy)(PJRT_Error_Destroy_Args *a);                      /* slot 0 */
    void (*Error_Message)(PJRT_Error_Message_Args *a);                      /* 1 */
    PJ_SLOT(Error_GetCode, PJRT_Error_GetCode_Args);                        /* 2 */
    PJ_SLOT(Plugin_Initialize, PJRT_Plugin_Initialize_Args);                /* 3 */
    PJ_RSV(4);
    PJ_SLOT(Event_Destroy, PJRT_Event_Destroy_Args);                        /* 5 */
    PJ_SLOT(Event_IsReady, PJRT_Event_IsReady_Args);                        /* 6 */
    PJ_RSV(7);
    PJ_SLOT(Event_Await, PJRT_Event_Await_Args);                            /* 8 */
    PJ_RSV(9);
    PJ_SLOT(Client_Create, PJRT_Client_Create_Args);                        /* 10 */
    PJ_SLOT(Client_Destroy, PJRT_Client_Destroy_Args);                      /* 11 */
    PJ_SLOT(Client_PlatformName, PJRT_Client_PlatformName_Args);            /* 12 */
    PJ_RSV(13); PJ_RSV(14); PJ_RSV(15);
    PJ_SLOT(Client_AddressableDevices, PJRT_Client_AddressableDevices_Args); /* 16 */
    PJ_RSV(17); PJ_RSV(18); PJ_RSV(19); PJ_RSV(20); PJ_RSV(21);
    PJ_SLOT(Client_BufferFromHostBuffer, PJRT_Client_BufferFromHostBuffer_Args); /* 22 */
    PJ_SLOT(DeviceDescription_Id, PJRT_DeviceDescription_Id_Args);          /* 23 */
    PJ_RSV(24); PJ_RSV(25);
    PJ_SLOT(DeviceDescription_Kind, PJRT_DeviceDescription_Kind_Args);      /* 26 */
    PJ_RSV(27); PJ_RSV(28);
    PJ_SLOT(Device_GetDescription, PJRT_Device_GetDescription_Args);        /* 29 */
    PJ_RSV(30); PJ_RSV(31); PJ_RSV(32);
    PJ_SLOT(Device_DefaultMemory, PJRT_Device_DefaultMemory_Args);          /* 33 */
    PJ_SLOT(Device_MemoryStats, PJRT_Device_MemoryStats_Args);              /* 34 */
    PJ_RSV(35); PJ_RSV(36); PJ_RSV(37); PJ_RSV(38); PJ_RSV(39);
    PJ_RSV(40); PJ_RSV(41); PJ_RSV(42); PJ_RSV(43); PJ_RSV(44);
    PJ_RSV(45); PJ_RSV(46); PJ_RSV(47); PJ_RSV(48); PJ_RSV(49);
    PJ_RSV(50); PJ_RSV(51); PJ_RSV(52); PJ_RSV(53); PJ_RSV(54);
    PJ_RSV(55); PJ_RSV(56); PJ_RSV(57);
    PJ_SLOT(Buffer_Destroy, PJRT_Buffer_Destroy_Args);                      /* 58 */
    PJ_SLOT(Buffer_ElementType, PJRT_Buffer_ElementType_Args);              /* 59 */
    PJ_SLOT(Buffer_Dimensions, PJRT_Buffer_Dimensions_Args);                /* 60 */
    PJ_RSV(61); PJ_RSV(62);
    PJ_SLOT(Buffer_GetMemoryLayout, PJRT_Buffer_GetMemoryLayout_Args);      /* 63 */
    PJ_SLOT(Buffer_OnDeviceSizeInBytes, PJRT_Buffer_OnDeviceSizeInBytes_Args); /* 64 */
    PJ_RSV(65); PJ_RSV(66); PJ_RSV(67); PJ_RSV(68); PJ_RSV(69);
    PJ_SLOT(Buffer_ToHostBuffer, PJRT_Buffer_ToHostBuffer_Args);            /* 70 */
    PJ_RSV(71); PJ_RSV(72); PJ_RSV(73); PJ_RSV(74); PJ_RSV(75);
    PJ_RSV(76); PJ_RSV(77); PJ_RSV(78); PJ_RSV(79); PJ_RSV(80);
    PJ_RSV(81); PJ_RSV(82); PJ_RSV(83); PJ_RSV(84); PJ_RSV(85);
    PJ_RSV(86); PJ_RSV(87); PJ_RSV(88); PJ_RSV(89); PJ_RSV(90);
    PJ_RSV(91); PJ_RSV(92); PJ_RSV(93); PJ_RSV(94); PJ_RSV(95);
    PJ_RSV(96); PJ_RSV(97); PJ_RSV(98); PJ_RSV(99);
    PJ_SLOT(Buffer_CopyRawToHost, PJRT_Buffer_CopyRawToHost_Args);          /* 100 (0.57) */
    PJ_SLOT(AsyncHostToDeviceTransferManager_Destroy,
            PJRT_AsyncHostToDeviceTransferManager_Destroy_Args);            /* 101 (0.60) */
    PJ_SLOT(AsyncHostToDeviceTransferManager_TransferData,
            PJRT_AsyncHostToDeviceTransferManager_TransferData_Args);       /* 102 (0.60) */
    PJ_SLOT(Client_CreateBuffersForAsyncHostToDevice,
            PJRT_Client_CreateBuffersForAsyncHostToDevice_Args);            /* 103 (0.60) */
    PJ_SLOT(AsyncHostToDeviceTransferManager_RetrieveBuffer,
            PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args);     /* 104 (0.62) */
    PJ_RSV(105); PJ_RSV(106); PJ_RSV(107); PJ_RSV(108); PJ_RSV(109);
    PJ_SLOT(Client_DmaMap, PJRT_Client_DmaMap_Args);                        /* 110 (0.67) */
    PJ_SLOT(Client_DmaUnmap, PJRT_Client_DmaUnmap_Args);                    /* 111 (0.67) */
} PJRT_Api;

#undef PJ_SLOT
#undef PJ_RSV

/* Slot k of the table lies at byte 40 + 8k. */
#define PJ_SLOT_OFFSET(k) (40u + 8u * (unsigned)(k))

/* 1 when the plugin's table holds the member at byte offset off (within its struct_size) and it
 * is set. Members past the plugin's struct_size are never read. */
#define pj_has_slot(api, member)                                                           \
    (offsetof(PJRT_Api, member) + sizeof((api)->member) <= (api)->struct_size && \
     (api)->member != NULL)

/* The layout, pinned (notes Appendix A, section 1.3). */
#include "device/dev_pjrt_abi_layout.h"

/* The Args header for struct T whose last field is `last`. */
#define PJ_ARGS(T, last) {.struct_size = PJRT_STRUCT_SIZE(T, last), .extension_start = NULL}

#endif /* SL_DEV_PJRT_ABI_H */
