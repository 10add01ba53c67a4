/* dev_pjrt_abi_layout.h - every offset and struct size of dev_pjrt_abi.h pinned with
 * _Static_assert (x86-64 / aarch64 LP64, from Appendix A of ../shared/spec/pjrt-notes.md), so that
 * a transcription error does not compile. Included by dev_pjrt_abi.h only, at its end, so every
 * file that uses the declarations (the backend, the stand-in plugin, test_pjrt) checks them. */
#ifndef SL_DEV_PJRT_ABI_LAYOUT_H
#define SL_DEV_PJRT_ABI_LAYOUT_H

#ifndef SL_DEV_PJRT_ABI_H
#error "include device/dev_pjrt_abi.h, which includes this file"
#endif

/* ---- the layout, pinned (notes Appendix A, section 1.3) --------------------------------------- */

#define PJ_AT(T, f, n) _Static_assert(offsetof(T, f) == (n), #T "." #f " at " #n)
#define PJ_SIZE(T, last, n) \
    _Static_assert(PJRT_STRUCT_SIZE(T, last) == (n), #T " struct size " #n)
#define PJ_AT_SLOT(f, k) _Static_assert(offsetof(PJRT_Api, f) == PJ_SLOT_OFFSET(k), #f " is slot " #k)

_Static_assert(sizeof(bool) == 1 && sizeof(int) == 4 && sizeof(void *) == 8 &&
                   sizeof(size_t) == 8 && sizeof(PJRT_Unused_Fn) == 8,
               "PJRT's offsets are those of LP64");

PJ_AT(PJRT_Api, pjrt_api_version, 16);
PJ_AT(PJRT_Api_Version, major_version, 16);
PJ_AT(PJRT_Api_Version, minor_version, 20);
PJ_SIZE(PJRT_Api_Version, minor_version, 24);
_Static_assert(offsetof(PJRT_Api, pjrt_api_version) + offsetof(PJRT_Api_Version, major_version) ==
                   32, "major version at 32");
PJ_AT_SLOT(Error_Destroy, 0);
PJ_AT_SLOT(Error_Message, 1);
PJ_AT_SLOT(Error_GetCode, 2);
PJ_AT_SLOT(Plugin_Initialize, 3);
PJ_AT_SLOT(Event_Destroy, 5);
PJ_AT_SLOT(Event_IsReady, 6);
PJ_AT_SLOT(Event_Await, 8);
PJ_AT_SLOT(Client_Create, 10);
PJ_AT_SLOT(Client_Destroy, 11);
PJ_AT_SLOT(Client_PlatformName, 12);
PJ_AT_SLOT(Client_AddressableDevices, 16);
PJ_AT_SLOT(Client_BufferFromHostBuffer, 22);
PJ_AT_SLOT(DeviceDescription_Id, 23);
PJ_AT_SLOT(DeviceDescription_Kind, 26);
PJ_AT_SLOT(Device_GetDescription, 29);
PJ_AT_SLOT(Device_DefaultMemory, 33);
PJ_AT_SLOT(Device_MemoryStats, 34);
PJ_AT_SLOT(Buffer_Destroy, 58);
PJ_AT_SLOT(Buffer_ElementType, 59);
PJ_AT_SLOT(Buffer_Dimensions, 60);
PJ_AT_SLOT(Buffer_GetMemoryLayout, 63);
PJ_AT_SLOT(Buffer_OnDeviceSizeInBytes, 64);
PJ_AT_SLOT(Buffer_ToHostBuffer, 70);
PJ_AT_SLOT(AsyncHostToDeviceTransferManager_Destroy, 101);
PJ_AT_SLOT(AsyncHostToDeviceTransferManager_TransferData, 102);
PJ_AT_SLOT(Client_CreateBuffersForAsyncHostToDevice, 103);
PJ_AT_SLOT(Buffer_CopyRawToHost, 100);
PJ_AT_SLOT(AsyncHostToDeviceTransferManager_RetrieveBuffer, 104);
PJ_AT_SLOT(Client_DmaMap, 110);
PJ_AT_SLOT(Client_DmaUnmap, 111);
/* 936 bytes: PJRT_Api_STRUCT_SIZE at 0.67, the table through DmaUnmap (notes Appendix A) */
_Static_assert(sizeof(PJRT_Api) == PJ_SLOT_OFFSET(112) && sizeof(PJRT_Api) == 936,
               "the table ends after slot 111");

PJ_AT(PJRT_Error_Destroy_Args, error, 16);
PJ_SIZE(PJRT_Error_Destroy_Args, error, 24);
PJ_AT(PJRT_Error_Message_Args, error, 16);
PJ_AT(PJRT_Error_Message_Args, message, 24);
PJ_AT(PJRT_Error_Message_Args, message_size, 32);
PJ_SIZE(PJRT_Error_Message_Args, message_size, 40);
PJ_AT(PJRT_Error_GetCode_Args, error, 16);
PJ_AT(PJRT_Error_GetCode_Args, code, 24);
PJ_SIZE(PJRT_Error_GetCode_Args, code, 28);

PJ_AT(PJRT_NamedValue, name, 16);
PJ_AT(PJRT_NamedValue, name_size, 24);
PJ_AT(PJRT_NamedValue, type, 32);
PJ_AT(PJRT_NamedValue, string_value, 40);
PJ_AT(PJRT_NamedValue, int64_value, 40);
PJ_AT(PJRT_NamedValue, bool_value, 40);
PJ_AT(PJRT_NamedValue, value_size, 48);
PJ_SIZE(PJRT_NamedValue, value_size, 56);
_Static_assert(sizeof(PJRT_NamedValue) == 56, "PJRT_NamedValue[] stride 56");

_Static_assert(sizeof(PJRT_Plugin_Initialize_Args) == 16, "PJRT_Plugin_Initialize_Args size 16");
PJ_AT(PJRT_Event_Destroy_Args, event, 16);
PJ_SIZE(PJRT_Event_Destroy_Args, event, 24);
PJ_AT(PJRT_Event_IsReady_Args, event, 16);
PJ_AT(PJRT_Event_IsReady_Args, is_ready, 24);
PJ_SIZE(PJRT_Event_IsReady_Args, is_ready, 25);

PJ_AT(PJRT_Client_Create_Args, create_options, 16);
PJ_AT(PJRT_Client_Create_Args, num_options, 24);
PJ_AT(PJRT_Client_Create_Args, kv_get_callback, 32);
PJ_AT(PJRT_Client_Create_Args, kv_get_user_arg, 40);
PJ_AT(PJRT_Client_Create_Args, kv_put_callback, 48);
PJ_AT(PJRT_Client_Create_Args, kv_put_user_arg, 56);
PJ_AT(PJRT_Client_Create_Args, client, 64);
PJ_AT(PJRT_Client_Create_Args, kv_try_get_callback, 72);
PJ_AT(PJRT_Client_Create_Args, kv_try_get_user_arg, 80);
PJ_SIZE(PJRT_Client_Create_Args, kv_try_get_user_arg, 88);
PJ_AT(PJRT_Client_Destroy_Args, client, 16);
PJ_SIZE(PJRT_Client_Destroy_Args, client, 24);
PJ_AT(PJRT_Client_PlatformName_Args, client, 16);
PJ_AT(PJRT_Client_PlatformName_Args, platform_name, 24);
PJ_AT(PJRT_Client_PlatformName_Args, platform_name_size, 32);
PJ_SIZE(PJRT_Client_PlatformName_Args, platform_name_size, 40);
PJ_AT(PJRT_Client_AddressableDevices_Args, client, 16);
PJ_AT(PJRT_Client_AddressableDevices_Args, addressable_devices, 24);
PJ_AT(PJRT_Client_AddressableDevices_Args, num_addressable_devices, 32);
PJ_SIZE(PJRT_Client_AddressableDevices_Args, num_addressable_devices, 40);

PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, client, 16);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, data, 24);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, type, 32);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, dims, 40);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, num_dims, 48);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, byte_strides, 56);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, num_byte_strides, 64);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics, 72);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, device, 80);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, memory, 88);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, device_layout, 96);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, done_with_host_buffer, 104);
PJ_AT(PJRT_Client_BufferFromHostBuffer_Args, buffer, 112);
PJ_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer, 120);

PJ_AT(PJRT_DeviceDescription_Id_Args, device_description, 16);
PJ_AT(PJRT_DeviceDescription_Id_Args, id, 24);
PJ_SIZE(PJRT_DeviceDescription_Id_Args, id, 28);
PJ_AT(PJRT_DeviceDescription_Kind_Args, device_description, 16);
PJ_AT(PJRT_DeviceDescription_Kind_Args, device_kind, 24);
PJ_AT(PJRT_DeviceDescription_Kind_Args, device_kind_size, 32);
PJ_SIZE(PJRT_DeviceDescription_Kind_Args, device_kind_size, 40);
PJ_AT(PJRT_Device_GetDescription_Args, device, 16);
PJ_AT(PJRT_Device_GetDescription_Args, device_description, 24);
PJ_SIZE(PJRT_Device_GetDescription_Args, device_description, 32);
PJ_AT(PJRT_Device_DefaultMemory_Args, device, 16);
PJ_AT(PJRT_Device_DefaultMemory_Args, memory, 24);
PJ_SIZE(PJRT_Device_DefaultMemory_Args, memory, 32);

PJ_AT(PJRT_Device_MemoryStats_Args, device, 16);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_in_use, 24);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_bytes_in_use, 32);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_bytes_in_use_is_set, 40);
PJ_AT(PJRT_Device_MemoryStats_Args, num_allocs, 48);
PJ_AT(PJRT_Device_MemoryStats_Args, num_allocs_is_set, 56);
PJ_AT(PJRT_Device_MemoryStats_Args, largest_alloc_size, 64);
PJ_AT(PJRT_Device_MemoryStats_Args, largest_alloc_size_is_set, 72);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_limit, 80);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_limit_is_set, 88);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_reserved, 96);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_reserved_is_set, 104);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_bytes_reserved, 112);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_bytes_reserved_is_set, 120);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_reservable_limit, 128);
PJ_AT(PJRT_Device_MemoryStats_Args, bytes_reservable_limit_is_set, 136);
PJ_AT(PJRT_Device_MemoryStats_Args, largest_free_block_bytes, 144);
PJ_AT(PJRT_Device_MemoryStats_Args, largest_free_block_bytes_is_set, 152);
PJ_AT(PJRT_Device_MemoryStats_Args, pool_bytes, 160);
PJ_AT(PJRT_Device_MemoryStats_Args, pool_bytes_is_set, 168);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_pool_bytes, 176);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set, 184);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_allocated_bytes, 192);
PJ_AT(PJRT_Device_MemoryStats_Args, peak_allocated_bytes_is_set, 200);
PJ_SIZE(PJRT_Device_MemoryStats_Args, peak_allocated_bytes_is_set, 201);
/* Plugins before 0.113 take the struct up to peak_pool_bytes_is_set. */
PJ_SIZE(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set, 185);

PJ_AT(PJRT_Buffer_Destroy_Args, buffer, 16);
PJ_SIZE(PJRT_Buffer_Destroy_Args, buffer, 24);
PJ_AT(PJRT_Buffer_ElementType_Args, buffer, 16);
PJ_AT(PJRT_Buffer_ElementType_Args, type, 24);
PJ_SIZE(PJRT_Buffer_ElementType_Args, type, 28);
PJ_AT(PJRT_Buffer_Dimensions_Args, buffer, 16);
PJ_AT(PJRT_Buffer_Dimensions_Args, dims, 24);
PJ_AT(PJRT_Buffer_Dimensions_Args, num_dims, 32);
PJ_SIZE(PJRT_Buffer_Dimensions_Args, num_dims, 40);
PJ_AT(PJRT_Buffer_OnDeviceSizeInBytes_Args, buffer, 16);
PJ_AT(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes, 24);
PJ_SIZE(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes, 32);
PJ_AT(PJRT_Buffer_ToHostBuffer_Args, src, 16);
PJ_AT(PJRT_Buffer_ToHostBuffer_Args, host_layout, 24);
PJ_AT(PJRT_Buffer_ToHostBuffer_Args, dst, 32);
PJ_AT(PJRT_Buffer_ToHostBuffer_Args, dst_size, 40);
PJ_AT(PJRT_Buffer_ToHostBuffer_Args, event, 48);
PJ_SIZE(PJRT_Buffer_ToHostBuffer_Args, event, 56);

PJ_AT(PJRT_Buffer_MemoryLayout_Tiled, minor_to_major, 16);
PJ_AT(PJRT_Buffer_MemoryLayout_Tiled, minor_to_major_size, 24);
PJ_AT(PJRT_Buffer_MemoryLayout_Tiled, tile_dims, 32);
PJ_AT(PJRT_Buffer_MemoryLayout_Tiled, tile_dim_sizes, 40);
PJ_AT(PJRT_Buffer_MemoryLayout_Tiled, num_tiles, 48);
PJ_SIZE(PJRT_Buffer_MemoryLayout_Tiled, num_tiles, 56);
PJ_AT(PJRT_Buffer_MemoryLayout_Strides, byte_strides, 16);
PJ_AT(PJRT_Buffer_MemoryLayout_Strides, num_byte_strides, 24);
PJ_SIZE(PJRT_Buffer_MemoryLayout_Strides, num_byte_strides, 32);
PJ_AT(PJRT_Buffer_MemoryLayout, tiled, 16);
PJ_AT(PJRT_Buffer_MemoryLayout, strides, 16);
PJ_AT(PJRT_Buffer_MemoryLayout, type, 72);
PJ_SIZE(PJRT_Buffer_MemoryLayout, type, 76);
_Static_assert(sizeof(PJRT_Buffer_MemoryLayout) == 80, "PJRT_Buffer_MemoryLayout sizeof 80");
PJ_AT(PJRT_Buffer_GetMemoryLayout_Args, buffer, 16);
PJ_AT(PJRT_Buffer_GetMemoryLayout_Args, layout, 24);
PJ_SIZE(PJRT_Buffer_GetMemoryLayout_Args, layout, 104);

PJ_AT(PJRT_Buffer_CopyRawToHost_Args, buffer, 16);
PJ_AT(PJRT_Buffer_CopyRawToHost_Args, dst, 24);
PJ_AT(PJRT_Buffer_CopyRawToHost_Args, offset, 32);
PJ_AT(PJRT_Buffer_CopyRawToHost_Args, transfer_size, 40);
PJ_AT(PJRT_Buffer_CopyRawToHost_Args, event, 48);
PJ_SIZE(PJRT_Buffer_CopyRawToHost_Args, event, 56);
PJ_AT(PJRT_Client_DmaMap_Args, client, 16);
PJ_AT(PJRT_Client_DmaMap_Args, data, 24);
PJ_AT(PJRT_Client_DmaMap_Args, size, 32);
PJ_SIZE(PJRT_Client_DmaMap_Args, size, 40);
PJ_AT(PJRT_Client_DmaUnmap_Args, client, 16);
PJ_AT(PJRT_Client_DmaUnmap_Args, data, 24);
PJ_SIZE(PJRT_Client_DmaUnmap_Args, data, 32);

PJ_AT(PJRT_ShapeSpec, dims, 16);
PJ_AT(PJRT_ShapeSpec, num_dims, 24);
PJ_AT(PJRT_ShapeSpec, element_type, 32);
PJ_SIZE(PJRT_ShapeSpec, element_type, 36);
_Static_assert(sizeof(PJRT_ShapeSpec) == 40, "PJRT_ShapeSpec[] stride 40");
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, client, 16);
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, shape_specs, 24);
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, num_shape_specs, 32);
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, device_layouts, 40);
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, num_device_layouts, 48);
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, memory, 56);
PJ_AT(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, transfer_manager, 64);
PJ_SIZE(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args, transfer_manager, 72);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args, transfer_manager, 16);
PJ_SIZE(PJRT_AsyncHostToDeviceTransferManager_Destroy_Args, transfer_manager, 24);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, transfer_manager, 16);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, buffer_index, 24);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, data, 32);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, offset, 40);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, transfer_size, 48);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, is_last_transfer, 56);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, done_with_h2d_transfer, 64);
PJ_SIZE(PJRT_AsyncHostToDeviceTransferManager_TransferData_Args, done_with_h2d_transfer, 72);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, transfer_manager, 16);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_index, 24);
PJ_AT(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_out, 32);
PJ_SIZE(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args, buffer_out, 40);

#undef PJ_AT
#undef PJ_SIZE
#undef PJ_AT_SLOT

#endif /* SL_DEV_PJRT_ABI_LAYOUT_H */
