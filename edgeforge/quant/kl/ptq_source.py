"""The guard of the PTQ patch: the source of Paddle 3.3's PostTrainingQuantization methods that
:mod:`.ptq_methods` mirrors. A method is replaced only while Paddle's source is exactly this."""

# The PostTrainingQuantization methods are replaced only while their source is exactly the one
# the replacements below mirror (Paddle 3.3); otherwise Paddle's own stay in place. quantize() is
# replaced only together with the other two.
ORIGINAL_SOURCES = {
    "_sample_histogram": '''\
def _sample_histogram(self):
    for var_name in self._quantized_act_var_name:
        var_tensor = utils.load_variable_data(self._scope, var_name)
        if (var_tensor.size == 0) or (
            var_name not in self._sampling_act_histogram
        ):
            self._zero_size_var_names.add(var_name)
            continue
        var_tensor_abs = np.abs(var_tensor)
        bins = self._sampling_act_histogram[var_name][1]
        hist, _ = np.histogram(var_tensor_abs, bins=bins)
        self._sampling_act_histogram[var_name][0] += hist
''',
    "_collect_activation_abs_min_max": """\
def _collect_activation_abs_min_max(self):
    '''
    Collect the abs_min and abs_max for all activation. When algo = KL,
    get the min and max value, and then calculate the threshold.
    '''
    for var_name in self._quantized_act_var_name:
        var_tensor = utils.load_variable_data(self._scope, var_name)
        if var_tensor.size == 0:
            self._zero_size_var_names.add(var_name)
            continue
        var_tensor = np.abs(var_tensor)
        min_value = float(np.min(var_tensor))
        max_value = float(np.max(var_tensor))
        if var_name not in self._sampling_act_abs_min_max:
            self._sampling_act_abs_min_max[var_name] = [
                min_value,
                max_value,
            ]
        else:
            if min_value < self._sampling_act_abs_min_max[var_name][0]:
                self._sampling_act_abs_min_max[var_name][0] = min_value
            if max_value > self._sampling_act_abs_min_max[var_name][1]:
                self._sampling_act_abs_min_max[var_name][1] = max_value
""",
    "quantize": """\
def quantize(self):
    '''
    Load the FP32 model, and use the calibrate data to calculate the forward-stage.
    Based on the sample data, we can get the quantization information, and obtain
    the final quantized model.

    Args:
        None
    Returns:
        the program of quantized model.
    '''
    self._load_model_data()
    self._collect_target_varnames()
    self._set_activation_persistable()

    if self._algo in ["KL", "hist"]:
        batch_id = 0
        with tqdm(
            total=self._batch_nums,
            bar_format='Preparation stage, Run batch:|{bar}| {n_fmt}/{total_fmt}',
            ncols=80,
        ) as t:
            for data in self._data_loader():
                self._executor.run(
                    program=self._program,
                    feed=data,
                    fetch_list=self._fetch_list,
                    return_numpy=False,
                    scope=self._scope,
                )
                self._collect_activation_abs_min_max()
                batch_id += 1
                t.update()
                if self._batch_nums and batch_id >= self._batch_nums:
                    break
        self._init_sampling_act_histogram()

    batch_id = 0
    with tqdm(
        total=self._batch_nums,
        bar_format='Sampling stage, Run batch:|{bar}| {n_fmt}/{total_fmt}',
        ncols=80,
    ) as t:
        for data in self._data_loader():
            self._executor.run(
                program=self._program,
                feed=data,
                fetch_list=self._fetch_list,
                return_numpy=False,
                scope=self._scope,
            )
            self._sampling()
            batch_id += 1
            t.update()
            if self._batch_nums and batch_id >= self._batch_nums:
                break

    if self._algo == 'avg':
        for var_name in self._quantized_act_var_name:
            if var_name not in self._quantized_var_avg:
                continue
            self._quantized_threshold[var_name] = np.array(
                self._quantized_var_avg[var_name]
            ).mean()

    if self._algo in ["KL", "hist"]:
        self._calculate_kl_hist_threshold()

    if self._round_type == 'adaround':
        self._adaround_apply()

    self._reset_activation_persistable()

    if self._algo == 'min_max':
        self._save_input_threshold()
    else:
        self._update_program()

    # save out_threshold for quantized ops.
    if not self.FLAG:
        self._save_output_threshold()

    if any(
        op_type in self.quant_config.activation_quant_operation_types
        for op_type in self._dynamic_quantize_op_type
    ):
        self._collect_dynamic_quantize_op_threshold(
            self._dynamic_quantize_op_type
        )

    utils.move_persistable_var_to_global_block(self._program)

    if not self._return_graph:
        return self._program
    else:
        main_graph = IrGraph(core.Graph(self._program.desc), for_test=True)
        return main_graph
""",
}
