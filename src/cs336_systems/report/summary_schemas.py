"""The schema of each section's summary: the keys its template reads, with their types.

Reports decide, templates word: a report writes ``results/<run>/<ID>/summary.json`` and the section
template ``writeup/templates/sections/<ID>.md.j2`` reads it as ``d``. ``SCHEMAS[ID]`` is a JSON Schema
(draft 2020-12) of that summary: every key the template reads is declared, as deep as the template
reads it; a key is required unless the template tests for it first (``is defined``, ``in``, ``.get``)
or a report leaves it out of some summaries. Keys a template does not read are not declared, and a
summary may hold them. ``tests/writeup/test_summary_schemas.py`` holds every committed summary to its
schema and every template to reading only what its schema declares; the writeup checks each summary
before it renders it (``check``).

The schemas are written with the helpers below: ``obj(...)`` an object with those keys (required,
unless wrapped in ``opt``), ``mapping(T)`` an object of any keys whose values are T, ``arr(T)`` a
list, ``null(T)`` T or null.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema

NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
ANY: dict = {}


class opt:
    """A key an object may lack."""

    def __init__(self, schema: dict):
        self.schema = schema


def null(schema: dict) -> dict:
    """``schema`` or null."""
    out = copy.deepcopy(schema)
    types = out.get("type")
    if types is None:
        return out
    out["type"] = [*(types if isinstance(types, list) else [types]), "null"]
    return out


def one_of_types(*schemas: dict) -> dict:
    """Any of these scalar types (a value that is a number in one run and a string in another)."""
    return {"type": [s["type"] for s in schemas]}


def arr(items: dict = ANY) -> dict:
    return {"type": "array", "items": items} if items else {"type": "array"}


def mapping(values: dict = ANY) -> dict:
    return {"type": "object", "additionalProperties": values} if values else {"type": "object"}


def obj(keys: dict | None = None, **more) -> dict:
    """An object with these keys (a dict for keys that are not Python names, keywords for the rest)."""
    props = {**(keys or {}), **more}
    return {"type": "object",
            "required": [k for k, v in props.items() if not isinstance(v, opt)],
            "properties": {k: (v.schema if isinstance(v, opt) else v) for k, v in props.items()}}


def section(**keys) -> dict:
    schema = obj(keys)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


# Every section's first line (templates/sections/_run.md.j2's run_line).
PROVENANCE = obj(gpus=arr(STR), hosts=arr(STR), first_utc=STR, last_utc=STR, commits=arr(STR), dirty=BOOL,
                 torch=arr(STR), records=INT, statuses=mapping(INT))

SCHEMAS: dict[str, dict] = {}

SCHEMAS["A1"] = section(
    backward_over_forward_median=null(NUM),
    batch=INT,
    bf16_across_processes=null(INT),
    bf16_compared=null(INT),
    bf16_faster_count=INT,
    bf16_paired=null(INT),
    bf16_slower=null(arr(obj(
        bf16_ms=NUM,
        bf16_std_ms=NUM,
        bound_by=obj(bf16=null(STR), fp32=null(STR)),
        context=INT,
        fp32_ms=NUM,
        fp32_std_ms=NUM,
        judged=STR,
        mode=STR,
        size=STR))),
    bf16_within_spread=null(arr(obj(context=INT, mode=STR, size=STR))),
    cv_by_precision=mapping(NUM),
    cv_max=NUM,
    cv_max_point=STR,
    cv_median=null(NUM),
    flat_in_work=null(arr(obj(
        context=INT,
        evidence=STR,
        mfu=null(NUM),
        mode=STR,
        precision=STR,
        size=STR))),
    flat_in_work_by_precision=mapping(INT),
    forward_grows_less_than_work=null(arr(STR)),
    forward_growth=null(mapping(obj({
        'flops_ratio': NUM,
        'from': INT,
        'ratio': NUM,
        'to': INT}))),
    fp32_forward_backward_rows=null(arr(obj(
        backward=NUM,
        context=INT,
        forward=NUM,
        ratio=NUM,
        size=STR,
        step=NUM))),
    grouped=null(BOOL),
    launch_bound=null(arr(obj(
        context=INT,
        evidence=STR,
        mode=STR,
        size=STR))),
    launch_bound_busy=NUM,
    mfu_best=mapping(obj(
        basis=STR,
        mfu=NUM,
        point=STR,
        tflops=NUM)),
    mfu_peaks=arr(STR),
    mfu_points=null(INT),
    min_turn_ms=null(NUM),
    more_work=NUM,
    most_steps_per_turn=null(INT),
    not_ok=null(arr(STR)),
    ok=INT,
    on_gpu=null(BOOL),
    points=INT,
    points_by_precision=mapping(INT),
    profiled_points=null(INT),
    provenance=PROVENANCE,
    rounds=null(INT),
    step_cv_flat=null(NUM),
    step_cv_rest=null(NUM),
    steps=INT,
    warm_processes=null(arr(obj(
        order=STR,
        size=STR,
        spread=NUM,
        warmups=arr(INT)))),
    warmup=null(arr(obj(
        first=NUM,
        first_slowest=BOOL,
        first_vs_rest=NUM,
        later_direction=null(STR),
        later_vs_warm=null(NUM),
        mean=NUM,
        ref_between=null(BOOL),
        ref_mean=null(NUM),
        ref_processes=INT,
        rest_mean=NUM,
        rest_std=NUM,
        size=STR,
        std=NUM,
        vs_longest=NUM,
        vs_warm=null(NUM),
        vs_warm_direction=null(STR),
        warmup=INT))),
    warmup_point=null(obj(
        batch=INT,
        context=INT,
        mode=STR,
        precision=STR,
        steps=INT)),
    warmup_steps=INT,
)

SCHEMAS["A2"] = section(
    a=null(arr(obj(nvtx_over_python=NUM))),
    a_findings=obj(
        a1_compared=null(INT),
        a1_outside_spread=null(arr(STR)),
        busy_range=arr(NUM),
        host_bound=null(arr(obj(
            gpu_busy=NUM,
            kernel_us_per_kernel=NUM,
            kernels=INT,
            point=STR,
            range_us_per_kernel=NUM))),
        nvtx_over_a1_range=null(arr(NUM)),
        shorter_within_spread=null(arr(obj(
            long=INT,
            long_ms=NUM,
            short=INT,
            short_ms=NUM,
            size=STR))),
        slower_shorter=arr(obj(
            kernels_grow=null(BOOL),
            long=INT,
            long_kernel_ms=NUM,
            long_kernels=INT,
            long_ms=NUM,
            long_range_us_per_kernel=NUM,
            short=INT,
            short_kernel_ms=NUM,
            short_kernels=INT,
            short_ms=NUM,
            short_range_us_per_kernel=NUM,
            size=STR,
            slower_issue=null(BOOL)))),
    b_findings=null(obj(
        calls=arr(INT),
        categories=arr(STR),
        compared=null(INT),
        differ=null(INT),
        differ_categories=arr(STR),
        differ_in_layout=null(BOOL),
        points=INT,
        share=arr(NUM))),
    batch=INT,
    c_findings=null(obj(
        categories=arr(STR),
        kernels=arr(obj(
            category=STR,
            kernel=STR,
            median_share=NUM,
            points=INT)),
        non_gemm_share=arr(NUM),
        points=INT)),
    d_findings=null(obj(empty_categories=null(arr(STR)), gemm_by_mode=null(mapping(obj(contexts=arr(INT), rising_with_size=null(arr(INT)), series=mapping(obj(shares=arr(NUM), sizes=arr(STR)))))), train=opt(obj(
            gemm_drop=arr(NUM),
            largest_gain=obj(optimizer=opt(INT)),
            optimizer_falls_with_context=arr(STR),
            points=INT,
            sizes=INT)))),
    d_growth=null(arr(obj(
        elementwise=NUM,
        gemm_forward=NUM,
        gemm_train=NUM,
        optimizer=NUM,
        other=NUM,
        point=STR))),
    e_findings=null(obj(
        longest=arr(obj(
            flops_softmax_over_final=NUM,
            point=STR,
            softmax_gb=NUM,
            softmax_tb_per_s=NUM,
            time_softmax_over_final=NUM)),
        longest_scores_over_final=arr(NUM),
        longest_vs_final=arr(NUM),
        longest_vs_scores_and_final=arr(NUM),
        median_vs_final=NUM,
        median_vs_scores_and_final=NUM,
        memory_bound=null(BOOL),
        memory_bound_share=NUM,
        softmax_hbm_share=null(arr(NUM)),
        softmax_passes=INT,
        sources=arr(STR))),
    empty_filters=null(arr()),
    failed=null(arr(obj(mode=STR, point=STR, status=STR))),
    fallback_reasons=arr(STR),
    host_bound_below=NUM,
    nsys_versions=arr(STR),
    provenance=PROVENANCE,
    share_threshold=NUM,
    sources=arr(STR),
    steps=INT,
    table_units=arr(STR),
    warmup_steps=INT,
    warnings=null(arr()),
)

SCHEMAS["A3"] = section(
    at_course_terms=mapping(obj(abs_error=NUM, value=NUM)),
    at_largest_terms=obj({
        'fp16 += fp16': obj(value=NUM)}),
    checks=obj(
        fp16_term=NUM,
        mixed_is_term_rounding=null(BOOL),
        stall=mapping(obj(
            matches=null(BOOL),
            measured=NUM,
            predicted=NUM,
            stored_bits=INT)),
        upcasts_agree=null(BOOL)),
    course_exact=NUM,
    course_terms=INT,
    largest_exact=NUM,
    largest_terms=INT,
    provenance=PROVENANCE,
    term=NUM,
)

SCHEMAS["A4"] = section(
    backward_vs_forward=null(mapping(STR)),
    bf16_slower=null(arr(obj(
        bf16_ms=NUM,
        bf16_std_ms=NUM,
        context=INT,
        fp32_ms=NUM,
        fp32_std_ms=NUM,
        judged=STR,
        series=STR,
        size=STR,
        speedup=NUM))),
    bf16_within_spread=null(arr(obj(context=INT, series=STR, size=STR))),
    dtype_rules=null(arr(obj(cells=mapping(STR), kind=STR, stage=STR))),
    dtypes_not_ok=null(arr(STR)),
    kernels=null(obj(
        compare=null(obj(
            bf16_busy_is=null(STR),
            bf16_step_is=STR,
            cast_ms=obj(bf16=NUM, fp32=NUM),
            extra_casts=NUM,
            extra_kernels=NUM,
            gemm_ms=obj(bf16=NUM, fp32=NUM),
            launch_bound=null(obj(bf16=null(BOOL), fp32=null(BOOL))),
            rounds=null(INT),
            slowdown_outside_kernels=null(BOOL),
            step_judged=STR)),
        device=STR,
        not_ok=null(arr()),
        point=obj(
            batch=INT,
            context=INT,
            mode=STR,
            size=STR),
        precisions=null(obj(bf16=obj(busy_share=null(NUM), step_ms=NUM, step_std_ms=NUM), fp32=obj(busy_share=null(NUM), step_ms=NUM, step_std_ms=NUM))),
        unit=STR)),
    layernorm_autocast_output=null(arr(STR)),
    layernorm_focus=null(mapping(null(obj(bf16=opt(obj({
            'F.layer_norm on a low-precision input': obj(rel_error=null(NUM)),
            'F.layer_norm under autocast': obj(output_dtype=STR, rel_error=null(NUM)),
            'formula, one-pass E[x²]−E[x]², in low precision': obj(rel_error=null(NUM)),
            'formula, two-pass, in fp32': obj(rel_error=null(NUM)),
            'formula, two-pass, in low precision': obj(rel_error=null(NUM))})), fp16=obj({
            'F.layer_norm on a low-precision input': obj(rel_error=null(NUM)),
            'F.layer_norm under autocast': obj(output_dtype=STR, rel_error=null(NUM)),
            'formula, one-pass E[x²]−E[x]², in low precision': obj(rel_error=null(NUM)),
            'formula, two-pass, in fp32': obj(rel_error=null(NUM)),
            'formula, two-pass, in low precision': obj(rel_error=null(NUM))}), offset=NUM)))),
    layernorm_shape=null(arr(INT)),
    median_speedup_by_phase=null(mapping(NUM)),
    provenance=PROVENANCE,
    speedup_grows_with_size=null(BOOL),
    speedup_trend=null(mapping(obj(
        sizes=arr(STR),
        speedups=arr(NUM),
        steps=null(arr(obj({
            'direction': STR,
            'from': STR,
            'to': STR}))),
        verdict=STR))),
    timing_across_processes=null(INT),
    timing_batch=null(INT),
    timing_grid=null(obj(
        contexts=arr(INT),
        modes=arr(STR),
        precisions=arr(STR),
        records=INT,
        sizes=arr(STR))),
    timing_not_ok=null(arr(STR)),
    timing_paired=null(INT),
    timing_provenance=null(obj(gpus=arr(STR))),
    timing_rounds=null(INT),
    timing_sizes=INT,
    timing_steps=null(INT),
)

SCHEMAS["A5"] = section(
    allocator_check=null(obj(max_relative_difference=NUM, max_reserved_over_allocated_mib=NUM, points=INT)),
    batch=INT,
    bf16_vs_fp32=null(arr(obj(context=INT, mode=STR, ratio=NUM))),
    contexts=arr(INT),
    d_model=INT,
    device=STR,
    not_ok=null(arr(STR)),
    num_layers=INT,
    ok=INT,
    phase_sources=arr(STR),
    phases=arr(obj(
        context=INT,
        initial_mib=NUM,
        mode=STR,
        peak_mib=NUM,
        peak_phase=null(STR),
        phases=arr(obj(
            end_mib=NUM,
            gpu_ms=null(NUM),
            host_ms=NUM,
            name=STR,
            peak_mib=NUM,
            start_mib=NUM)),
        precision=STR)),
    points=INT,
    precisions=arr(STR),
    provenance=PROVENANCE,
    residual=arr(obj(
        batch=INT,
        context=INT,
        d_model=INT,
        mib=NUM)),
    size=STR,
    snapshots=null(arr(STR)),
    sources=null(arr(STR)),
    timelines=arr(obj(
        context=INT,
        mode=STR,
        path=STR,
        precision=STR,
        status=STR)),
    top_allocations=null(arr(obj(
        count=INT,
        frame=null(STR),
        node=null(STR),
        op=null(STR),
        size_bytes=INT))),
    top_context=INT,
    top_precision=STR,
    warmup=INT,
)

SCHEMAS["A6"] = section(
    A_bytes=INT,
    A_terms=mapping(INT),
    a_bytes=INT,
    activation_model_at_opt_gib=NUM,
    attention_share=NUM,
    best_measured_k=null(INT),
    best_measured_peak_gib=null(NUM),
    fitting_k=null(arr(INT)),
    k_opt=INT,
    k_star=NUM,
    measured_peak=null(BOOL),
    memory_note=null(STR),
    modelled_baseline_gib=NUM,
    no_checkpoint_activations_gib=NUM,
    not_ok=null(arr(STR)),
    num_blocks=INT,
    peak_slope_gib_per_block=null(NUM),
    provenance=PROVENANCE,
    rows=null(arr(obj(k=INT, status=STR))),
    step_ms_range=null(arr(NUM)),
    step_paired=null(BOOL),
    step_steps=null(arr(obj({
        'direction': STR,
        'from': INT,
        'to': INT}))),
    workload=obj(batch=INT, context=INT, size=STR),
)

SCHEMAS["B1"] = section(
    before_backward=null(obj(
        constant=null(BOOL),
        longest=obj(
            d=INT,
            measured_MiB=NUM,
            predicted_MiB=NUM,
            seq=INT),
        points=INT,
        rest_max_MiB=NUM,
        rest_min_MiB=NUM)),
    in_turns=opt(null(INT)),
    limits=obj(compiled=opt(null(obj(first_oom=null(arr(INT)), largest_fit=null(arr(INT))))), eager=opt(null(obj(first_oom=null(arr(INT)), largest_fit=null(arr(INT)))))),
    out_of_memory=null(arr(obj(
        allocator=obj(
            allocated_MiB=opt(NUM),
            free_MiB=opt(NUM),
            requested_MiB=opt(NUM),
            reserved_unallocated_MiB=opt(NUM)),
        cause=STR,
        d=INT,
        failed_during=null(STR),
        failed_during_known=null(STR),
        needed_at_least_MiB=null(NUM),
        predicted_backward_peak_MiB=NUM,
        seq=INT,
        undercount=null(obj(
            at_least_MiB=NUM,
            closed_form_MiB=NUM,
            matrices=NUM,
            needed_over_saved=NUM)),
        variant=STR))),
    peaks=null(mapping(mapping(obj(
        longest=obj(
            d=INT,
            excess_matrices=null(NUM),
            measured_MiB=NUM,
            over_saved=NUM,
            predicted_MiB=NUM,
            seq=INT),
        max=NUM,
        min=NUM,
        points=INT)))),
    provenance=PROVENANCE,
    rounds=arr(INT),
    smallest_oom=null(obj(
        allocator=obj(
            capacity_MiB=opt(NUM),
            free_MiB=opt(NUM),
            requested_MiB=opt(NUM),
            reserved_unallocated_MiB=opt(NUM)),
        cause=STR,
        d=INT,
        needed_at_least_MiB=null(NUM),
        predicted_backward_peak_MiB=NUM,
        seq=INT)),
    statuses=mapping(INT),
)

SCHEMAS["B2"] = section(
    at_longest=null(obj(
        backward_speedup=NUM,
        compiled_MiB=NUM,
        d=INT,
        eager_MiB=NUM,
        forward_speedup=NUM,
        seq=INT)),
    attention_points=opt(null(INT)),
    fits_only_compiled=opt(null(arr(obj(
        d=INT,
        eager_cause=STR,
        eager_failed_during=null(STR),
        eager_failed_during_known=null(STR),
        eager_held_MiB=null(NUM),
        predicted_forward_peak_MiB=null(NUM),
        seq=INT)))),
    forward_judged=opt(null(obj(paired=null(INT), points=INT, within=INT))),
    forward_losses=opt(null(obj(all_shorter_than_wins=null(BOOL), extra_us=arr(NUM), seqs=arr(INT)))),
    memory=opt(null(obj(backward_peak=null(obj(
            lower=null(BOOL),
            max=NUM,
            min=NUM,
            same=null(BOOL))), forward_peak=null(obj(
            lower=null(BOOL),
            max=NUM,
            min=NUM,
            same=null(BOOL))), held_for_backward=null(obj(
            max=NUM,
            min=NUM,
            points=INT,
            same=null(BOOL)))))),
    provenance=PROVENANCE,
    speedup=null(obj(backward=null(obj(max=NUM, median=NUM, min=NUM)), forward=null(obj(max=NUM, median=NUM, min=NUM)))),
    whole_model=opt(null(obj(
        batch=INT,
        best=obj(mode=STR, size=STR),
        both_ok=INT,
        compile=arr(STR),
        compile_seconds=null(obj(max=NUM, min=NUM)),
        compiled_graphs=null(arr(INT)),
        context=INT,
        fits_only_compiled=null(arr()),
        in_turns=opt(null(INT)),
        loss_checks=obj(
            checked=null(INT),
            failed=null(arr()),
            max_abs_diff=NUM,
            passed=INT,
            rtol=NUM),
        not_ok=null(arr()),
        optimizer=opt(null(obj(
            compiled_faster=null(arr(STR)),
            compiled_slower=null(arr(STR)),
            paired=opt(INT),
            points=opt(INT),
            ratio=obj(max=NUM, min=NUM),
            share_of_step=obj(max=NUM, min=NUM),
            within=null(arr(STR))))),
        peak_memory=opt(null(obj(by_mode=mapping(obj(largest=obj(compiled_GiB=NUM, eager_GiB=NUM, size=STR), max=NUM, min=NUM)), only_with_backward=null(BOOL)))),
        phase_speedup=mapping(obj(max=NUM, median=NUM, min=NUM)),
        points=INT,
        rounds=arr(INT),
        size_trend=opt(null(mapping(obj(
            first=obj(size=STR, speedup=NUM),
            largest_against_smallest=STR,
            last=obj(size=STR, speedup=NUM),
            trend=STR)))),
        step_speedup=null(obj(max=NUM, median=NUM, min=NUM)),
        worst=obj(mode=STR, size=STR)))),
)

SCHEMAS["B3"] = section(
    lse_better=opt(null(arr(STR))),
    provenance=PROVENANCE,
    ragged=opt(null(BOOL)),
    ran=opt(null(obj(
        facts=arr(obj(
            fact=STR,
            known=null(INT),
            label=STR,
            source=STR,
            values=null(arr(STR)))),
        lengths=INT,
        records=null(INT),
        tiles=null(arr(obj(
            dkdv=STR,
            dq=STR,
            forward=STR,
            key=arr(STR),
            seqs=STR,
            source=STR))),
        tiles_vary_with_length=null(BOOL),
        tree=null(obj(compared=arr(STR), differs=null(arr(obj(label=STR, ran=arr(STR), tree=arr(STR))))))))),
    same_order=NUM,
    shape=arr(INT),
    worst_ratio=null(mapping(obj(
        causal=null(BOOL),
        function=STR,
        ours=NUM,
        plain=NUM,
        quantity=STR,
        ratio=NUM,
        same_order=null(BOOL)))),
)

SCHEMAS["B4"] = section(
    accounting=opt(null(mapping(obj(
        faster_than_floor=null(BOOL),
        pytorch_bytes_floor_ms=null(NUM),
        pytorch_floor_ms=null(NUM),
        pytorch_flops=INT,
        pytorch_flops_floor_ms=null(NUM),
        pytorch_matrix_bytes=INT,
        pytorch_ms=NUM,
        pytorch_of_peak=null(NUM),
        pytorch_peak=null(STR),
        pytorch_precision=null(STR),
        pytorch_products=INT,
        pytorch_tflops=NUM,
        slower_by_rate=null(BOOL),
        sources=arr(STR),
        triton_flops=null(INT),
        triton_mode=null(STR),
        triton_ms=NUM,
        triton_of_peak=null(NUM),
        triton_peak=null(STR),
        triton_products=null(INT),
        triton_tflops=null(NUM))))),
    backward=null(mapping(obj(pytorch_ms=NUM, speedup=NUM, triton_ms=NUM))),
    provenance=PROVENANCE,
    ran=opt(null(obj(
        facts=arr(obj(
            fact=STR,
            known=null(INT),
            label=STR,
            source=STR,
            values=null(arr(STR)))),
        lengths=INT,
        records=null(INT),
        tiles=null(arr(obj(
            dkdv=STR,
            dq=STR,
            forward=STR,
            key=arr(STR),
            seqs=STR,
            source=STR))),
        tiles_vary_with_length=null(BOOL),
        tree=null(obj(compared=arr(STR), differs=null(arr(obj(label=STR, ran=arr(STR), tree=arr(STR))))))))),
    shape=arr(INT),
    tuner=opt(arr(obj(
        causal=null(BOOL),
        chosen=STR,
        dkdv_ms=NUM,
        dq_ms=NUM,
        fused_ms=null(NUM),
        fused_over_separate=null(NUM),
        gpu=STR,
        key=STR,
        separate_ms=NUM,
        shape=arr(INT)))),
)

SCHEMAS["B5"] = section(
    bf16_gap_trend=obj(series=null(INT), widening=INT),
    flash_eager_goal=null(obj(
        points=null(INT),
        ratio=NUM,
        within=INT,
        worst=null(obj(
            d=INT,
            dtype=STR,
            other_ms=NUM,
            ours_ms=NUM,
            **{'pass': STR},
            ratio=NUM,
            seq=INT)))),
    flash_goal=obj(
        by_graph=null(INT),
        flat_lost=null(INT),
        grid_explained=null(INT),
        groups=arr(obj(
            d=INT,
            dtype=STR,
            flat=null(BOOL),
            other_ms=arr(NUM),
            ours_ms=arr(NUM),
            **{'pass': STR},
            seqs=arr(INT),
            timing=STR,
            worst=obj(
                busy=NUM,
                grid_explains=opt(null(BOOL)),
                other_of_peak=NUM,
                other_peak_short=null(STR),
                other_tflops=NUM,
                ours_of_peak=NUM,
                ours_tflops=NUM,
                peak_short=null(STR),
                programs=opt(null(INT)),
                seq=INT,
                sms=opt(null(INT))))),
        lost=null(INT),
        max_of_peak=null(NUM),
        paired=null(INT),
        points=null(INT),
        programs_from=null(arr(STR)),
        sms_missing=null(BOOL),
        within=INT,
        won=INT,
        work_groups=null(INT)),
    flash_goal_min_seq=INT,
    flash_over_ours=null(NUM),
    flat_factor=NUM,
    flat_span=INT,
    in_turns=null(INT),
    leaderboard=obj({
        'ours': NUM,
        'sdpa-cudnn': null(NUM),
        'sdpa-flash': null(NUM)}),
    leaderboard_failed=mapping(),
    leaderboard_ran=opt(null(obj(facts=null(arr(obj(
            known=INT,
            label=STR,
            source=STR,
            values=arr(STR)))), records=null(INT), unreadable=mapping()))),
    leaderboard_shape=STR,
    leaderboard_split=obj(backward=opt(null(obj({
            'ours': opt(null(NUM)),
            'sdpa-cudnn': opt(null(NUM))}))), forward=opt(null(obj({
            'ours': opt(null(NUM)),
            'sdpa-cudnn': opt(null(NUM))})))),
    losses_vs_plain=obj(
        by_dtype=mapping(INT),
        by_graph=null(INT),
        flat_lost=null(INT),
        grid_explained=null(INT),
        groups=arr(obj(
            d=INT,
            dtype=STR,
            flat=null(BOOL),
            other_ms=arr(NUM),
            ours_ms=arr(NUM),
            **{'pass': STR},
            seqs=arr(INT),
            timing=STR,
            worst=obj(
                busy=opt(NUM),
                grid_explains=opt(null(BOOL)),
                other_of_peak=null(NUM),
                other_peak_short=null(STR),
                other_tflops=NUM,
                ours_of_peak=null(NUM),
                ours_tflops=NUM,
                peak_short=null(STR),
                programs=opt(null(INT)),
                seq=INT,
                sms=opt(null(INT))))),
        lost=null(INT),
        max_of_peak=null(NUM),
        paired=null(INT),
        points=INT,
        programs_from=null(arr(STR)),
        sms_missing=null(BOOL),
        unexplained=null(INT),
        within=INT,
        won=INT,
        work_groups=null(INT)),
    max_seq=INT,
    ok=INT,
    ours_first_oom_seq=null(INT),
    ours_over_cudnn=null(NUM),
    ours_ran=obj(
        commits=arr(STR),
        facts=arr(obj(
            fact=STR,
            known=null(INT),
            label=STR,
            source=STR,
            values=null(arr(STR)))),
        lengths=INT,
        records=null(INT),
        tiles=null(arr(obj(
            dkdv=STR,
            dq=STR,
            forward=STR,
            key=arr(one_of_types(INT, STR)),
            seqs=STR,
            source=STR))),
        tiles_vary_with_length=null(BOOL),
        tree=null(obj(compared=arr(STR), differs=null(arr(obj(label=STR, ran=arr(STR), tree=arr(STR))))))),
    ours_splits=null(obj(backward=opt(null(INT)), forward=opt(null(INT)))),
    plain_first_oom_seq=null(INT),
    plain_oom=null(arr(obj(
        ds=arr(INT),
        dtype=STR,
        first_seq=INT,
        **{'pass': STR}))),
    points=INT,
    provenance=PROVENANCE,
    ratios=obj({
        'plain': opt(obj(
            by_graph=opt(null(INT)),
            max=NUM,
            max_at=obj(
                d=STR,
                dtype=STR,
                **{'pass': STR},
                seq=STR),
            median=NUM,
            min=NUM,
            min_at=obj(
                d=STR,
                dtype=STR,
                **{'pass': STR},
                seq=STR),
            points=INT)),
        'sdpa-cudnn': opt(obj(
            by_graph=null(INT),
            max=NUM,
            median=NUM,
            min=NUM,
            points=INT))}),
    rounds=arr(INT),
    statuses=mapping(INT),
    tflops_plot=opt(null(obj(
        ds=arr(INT),
        dtype=STR,
        graph=null(INT),
        peak=null(STR),
        points=INT))),
    timing_check=obj(
        failed=mapping(obj(impls=arr(STR), points=INT, reason=STR)),
        graph_slower=null(INT),
        launch_bound=null(INT),
        not_judged=null(INT),
        per_impl=mapping(obj(launch_bound=INT, max_seq=null(INT), points=INT)),
        points=null(INT)),
)

SCHEMAS["C1"] = section(
    algbw_by_ranks=arr(obj(
        algbw_GBps=arr(NUM),
        backend=STR,
        falls=null(BOOL),
        world_sizes=arr(INT))),
    fit_table=opt(arr(obj(
        backend=STR,
        largest_busbw_GBps=NUM,
        largest_ms=NUM,
        o_ms=NUM,
        w_GBps=null(NUM),
        world_size=INT))),
    headline=opt(null(obj(
        gloo=obj(busbw_GBps=NUM, ms=NUM, o_ms=NUM),
        gloo_over_nccl=NUM,
        nccl=obj(busbw_GBps=NUM, ms=NUM, o_ms=NUM),
        size_mb=NUM,
        world_size=INT))),
    hosts=arr(obj(host_gpus=INT, series=arr(STR))),
    provenance=PROVENANCE,
    sizes_mb=arr(NUM),
    skipped=null(arr(obj(backend=STR, reason=STR, world_size=INT))),
    slower_smaller=arr(obj(
        backend=STR,
        large_mb=NUM,
        large_ms=NUM,
        large_range=STR,
        small_mb=NUM,
        small_ms=NUM,
        small_range=STR,
        within_spread=null(BOOL),
        world_size=INT)),
)

SCHEMAS["C2"] = section(
    by_precision=mapping(mapping(null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)))),
    first_precision=STR,
    naive=null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)),
    naive_calls=INT,
    precisions=arr(STR),
    provenance=PROVENANCE,
    setup=obj(
        backend=STR,
        context=INT,
        global_batch=INT,
        rounds=null(INT),
        size=STR,
        steps=INT,
        warmup=INT,
        world_size=INT),
)

SCHEMAS["C3"] = section(
    baseline=null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)),
    by_precision=mapping(mapping(null(obj(
        backward_ms=NUM,
        comm_share=null(NUM),
        comm_wait_ms=null(NUM),
        forward_ms=NUM,
        inside_backward=opt(null(mapping())),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)))),
    first_precision=STR,
    naive=null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=opt(NUM),
        step_ms=NUM,
        variant=STR)),
    naive_calls=INT,
    paired=mapping(BOOL),
    precisions=arr(STR),
    provenance=PROVENANCE,
    setup=obj(
        backend=STR,
        context=INT,
        global_batch=INT,
        rounds=null(INT),
        size=STR,
        steps=INT,
        warmup=INT,
        world_size=INT),
    torch_ddp=null(obj(
        backward_ms=NUM,
        comm_share=null(NUM),
        comm_wait_ms=null(NUM),
        forward_ms=NUM,
        inside_backward=opt(null(obj(
            backward_ms=NUM,
            excess=null(obj(ms=NUM)),
            longest=null(BOOL),
            reference=STR,
            steps=mapping(obj(sign=INT))))),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=opt(NUM),
        step_ms=NUM,
        variant=STR)),
    versus=obj({
        'torch-ddp': opt(obj(naive=opt(null(obj(
                high_ms=NUM,
                low_ms=NUM,
                ms=NUM,
                paired=opt(null(BOOL)),
                sign=INT)))))}),
)

SCHEMAS["C4"] = section(
    by_precision=mapping(mapping(null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)))),
    first_precision=STR,
    flat=null(obj(comm_wait_ms=NUM)),
    naive=null(obj(comm_wait_ms=NUM)),
    per_call=opt(null(obj(
        calls=obj(flat=INT, naive=INT),
        extra_passes_ms=NUM,
        grad_MB=NUM,
        memory_GBps=null(NUM),
        o_low_ms=NUM,
        o_ms=NUM,
        waits=obj(
            high_ms=NUM,
            low_ms=NUM,
            ms=NUM,
            sign=INT)))),
    precisions=arr(STR),
    provenance=PROVENANCE,
    versus=obj(flat=opt(obj(naive=opt(null(obj(
                high_ms=NUM,
                low_ms=NUM,
                ms=NUM,
                paired=opt(null(BOOL)),
                sign=INT)))))),
)

SCHEMAS["C5"] = section(
    by_precision=mapping(mapping(null(obj(
        backward_ms=NUM,
        comm_share=null(NUM),
        comm_wait_ms=null(NUM),
        forward_ms=NUM,
        inside_backward=opt(null(mapping())),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)))),
    first_precision=STR,
    overlap=null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)),
    precisions=arr(STR),
    provenance=PROVENANCE,
)

SCHEMAS["C6"] = section(
    baseline=null(obj(step_ms=NUM)),
    by_precision=mapping(mapping(null(obj(
        backward_ms=NUM,
        comm_share=null(NUM),
        comm_wait_ms=null(NUM),
        forward_ms=NUM,
        inside_backward=opt(null(mapping())),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)))),
    compute_gaps=obj(naive=opt(mapping(NUM)), overlap=opt(mapping(NUM))),
    first_precision=STR,
    naive=null(obj(backward_ms=NUM, comm_wait_ms=NUM, overhead_ms=opt(null(NUM)))),
    overlap=null(obj(
        backward_ms=NUM,
        comm_wait_ms=NUM,
        overhead_ms=opt(NUM),
        overhead_paired=opt(null(BOOL)))),
    precisions=arr(STR),
    provenance=PROVENANCE,
    torch_ddp=null(obj(inside_backward=opt(null(obj(
            backward_ms=NUM,
            excess=null(obj(ms=NUM)),
            longest=null(BOOL),
            reference=null(STR),
            steps=mapping(obj(sign=INT))))), step_ms=NUM)),
    traced=null(arr(STR)),
    versus=obj(overlap=opt(mapping(obj(
            high_ms=NUM,
            low_ms=NUM,
            ms=NUM,
            paired=opt(null(BOOL)),
            sign=INT)))),
)

SCHEMAS["C7"] = section(
    bucketed=null(arr(obj(
        buckets=NUM,
        comm_wait_ms=NUM,
        step_ms=NUM,
        variant=STR))),
    first_precision=STR,
    precisions=arr(STR),
    provenance=PROVENANCE,
)

SCHEMAS["C8"] = section(
    accuracy=null(arr(obj(diff_over_update=null(NUM), weights_rel_diff=null(NUM)))),
    against_overlap=opt(null(mapping())),
    best_bucket_size=opt(null(mapping())),
    beyond=arr(obj(variant=STR)),
    compute_gaps=null(mapping(mapping(NUM))),
    first_precision=STR,
    has_overhead_table=null(BOOL),
    kernel_time=opt(null(mapping(mapping(NUM)))),
    ladder=opt(null(arr(obj(
        below=STR,
        high_ms=NUM,
        low_ms=NUM,
        ms=NUM,
        paired=BOOL,
        precision=STR,
        removed_pass_ms=null(NUM),
        rung=STR,
        sign=INT)))),
    model=null(mapping()),
    others=obj({
        'torch-ddp': null(obj(inside_backward=opt(null(obj(
                backward_ms=NUM,
                excess=null(obj(high_ms=NUM, low_ms=NUM, ms=NUM)),
                longest=null(BOOL),
                reference=STR,
                steps=mapping(obj(sign=INT))))), step_ms=NUM))}),
    overheads=mapping(obj(
        best=null(STR),
        paired=null(BOOL),
        ratio=null(NUM),
        rows=mapping(obj(high_ms=NUM, low_ms=NUM, ms=NUM)),
        verdict=STR)),
    paired=null(mapping(BOOL)),
    per_call=null(obj(calls=obj(naive=INT), o_high_ms=null(NUM))),
    precisions=arr(STR),
    provenance=PROVENANCE,
)

SCHEMAS["C9"] = section(
    a=mapping(NUM),
    b=mapping(NUM),
    c=mapping(one_of_types(BOOL, NUM)),
    clusters=arr(STR),
    fsdp_at_tokens=mapping(INT),
    global_batch_tokens=INT,
    hardware=obj({
        'H100 SXM': obj(bf16_TFLOPs=NUM, hbm_GB=NUM, link_GBps=NUM)}),
    ib_GBps=NUM,
    model=mapping(INT),
    provenance=PROVENANCE,
    scaling=mapping(mapping(mapping(mapping(null(one_of_types(BOOL, NUM, STR)))))),
    scaling_models=obj(xl=obj(parameters=INT)),
    stated_tokens=INT,
    tricks=arr(obj(
        effect=STR,
        equation=STR,
        name=STR,
        references=STR)),
)

SCHEMAS["C10"] = section(
    by_precision=mapping(mapping(null(obj(
        backward_ms=NUM,
        comm_share=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        inside_backward=opt(mapping()),
        optimizer_ms=NUM,
        overhead_ms=opt(null(NUM)),
        overhead_paired=opt(null(BOOL)),
        overhead_pct=NUM,
        step_ms=NUM,
        variant=STR)))),
    first_precision=STR,
    overlap=null(obj(optimizer_ms=NUM, step_ms=NUM)),
    precisions=arr(STR),
    provenance=PROVENANCE,
    setup=obj(world_size=INT),
    sharded=null(obj(optimizer_ms=NUM, step_ms=NUM)),
    versus=obj({
        'overlap-sharded': opt(obj(overlap=opt(null(obj(
                high_ms=NUM,
                low_ms=NUM,
                ms=NUM,
                paired=opt(null(BOOL)),
                sign=INT)))))}),
)

SCHEMAS["C11"] = section(
    memory=null(arr(obj(after_step_GiB=NUM, before_step_GiB=NUM, variant=STR))),
    provenance=PROVENANCE,
    setup=obj(steps=INT, warmup=INT, world_size=INT),
    versus=opt(obj({
        'overlap-sharded': opt(obj(overlap=opt(null(obj(
                high_ms=NUM,
                low_ms=NUM,
                ms=NUM,
                paired=opt(null(BOOL)),
                sign=INT)))))})),
)

SCHEMAS["C12"] = section(
    compute_gaps=mapping(mapping(NUM)),
    fsdp=null(obj(
        backward_ms=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        optimizer_ms=NUM,
        step_ms=NUM)),
    fsdp_bf16=null(obj(step_ms=NUM)),
    fsdp_forward=opt(null(arr(obj(
        baseline_forward_ms=null(NUM),
        baseline_precision=STR,
        baseline_variant=STR,
        beyond_bytes=opt(null(BOOL)),
        beyond_transfers=opt(null(BOOL)),
        bound_ms=opt(NUM),
        excess=opt(obj(high_ms=NUM, low_ms=NUM, ms=NUM)),
        excess_ms=opt(NUM),
        forward_ms=NUM,
        gathered_GB=NUM,
        gathers=INT,
        precision=STR,
        step_bound_ms=opt(null(NUM)),
        transfer_ms=opt(NUM),
        variant=STR)))),
    memory=arr(obj(variant=STR)),
    overlap=null(obj(
        backward_ms=NUM,
        comm_wait_ms=NUM,
        forward_ms=NUM,
        optimizer_ms=NUM,
        step_ms=NUM)),
    predicted_state_GiB=obj(fsdp=NUM, replicated=NUM),
    provenance=PROVENANCE,
    saving=opt(null(obj(
        before_step_GiB=NUM,
        gradients_GiB=NUM,
        peak_GiB=NUM,
        predicted_GiB=NUM,
        reconciled=null(BOOL),
        rise_GiB=obj(fsdp=NUM, overlap=NUM),
        start_GiB=NUM,
        without_gradients_GiB=NUM))),
    setup=obj(
        backend=STR,
        context=INT,
        global_batch=INT,
        rounds=null(INT),
        size=STR,
        steps=INT,
        warmup=INT,
        world_size=INT),
    torch_ddp=null(obj(inside_backward=opt(null(obj(
            backward_ms=NUM,
            excess=null(obj(high_ms=NUM, low_ms=NUM, ms=NUM)),
            longest=null(BOOL),
            reference=STR,
            steps=mapping(obj(sign=INT))))), step_ms=NUM)),
    traced=opt(null(arr(STR))),
    untraced_idle=opt(mapping(null(obj(
        idle_ms=NUM,
        idle_share=NUM,
        mostly_profiler=null(BOOL),
        step_ms=NUM,
        traced_idle_ms=NUM)))),
    versus=obj(fsdp=opt(obj(overlap=opt(null(obj(
                high_ms=NUM,
                low_ms=NUM,
                ms=NUM,
                paired=opt(null(BOOL)),
                sign=INT)))))),
)

SCHEMAS["E1"] = section(
    anchor_pairs_all_paired=null(BOOL),
    anchor_pairs_paired=null(INT),
    anchors=arr(obj(adds=STR, rung=STR)),
    batch=INT,
    beats_anchor_at=null(arr(STR)),
    bought=arr(obj(
        across_processes_at=INT,
        faster_at=INT,
        median_delta_ms=null(NUM),
        median_delta_pct=null(NUM),
        median_delta_peak_gib=null(NUM),
        points=INT,
        rung=STR,
        slower_at=INT,
        within_spread_at=INT)),
    checkpoint_groups=null(arr()),
    compared_points=null(INT),
    comparisons_across_processes=INT,
    compile=null(arr(STR)),
    faster_than_anchor_at=null(arr(STR)),
    gap=null(obj(
        backward_over_forward=NUM,
        context=INT,
        matmul_backward_over_forward=INT,
        mfu=null(NUM),
        ms=NUM,
        phases_ms=obj(backward=NUM, forward=NUM, optimizer=NUM),
        rung=STR,
        shares=obj(backward=NUM, forward=NUM, optimizer=NUM),
        size=STR)),
    goal=obj(
        context=INT,
        met=null(BOOL),
        mfu_target=NUM,
        point=null(obj(
            batch=INT,
            best_anchor=null(obj(mfu=null(NUM), ms=NUM, rung=STR)),
            best_rung=null(obj(mfu=null(NUM), ms=NUM, rung=STR)),
            best_vs_anchor_direction=null(STR),
            best_vs_anchor_judged=null(obj(
                across_leases=null(BOOL),
                difference_ms=NUM,
                hours_apart=null(NUM),
                paired=null(BOOL),
                rounds=INT,
                spread_ms=null(NUM))),
            best_vs_anchor_size=null(NUM),
            best_vs_anchor_spread=null(STR),
            speedup_over_fp32=null(NUM))),
        shortfalls=arr(STR),
        size=STR),
    jobs=null(INT),
    kernel_comparison=null(obj(
        anchor=null(obj(
            busy_abs_ms=NUM,
            busy_delta_ms=null(NUM),
            busy_direction=STR,
            goal_pair_unsettled=null(BOOL),
            largest=STR,
            largest_abs_ms=NUM,
            largest_direction=STR,
            largest_stands_out=null(BOOL),
            others_max_abs_ms=NUM,
            rung=STR,
            step_abs_ms=NUM,
            step_direction=STR)),
        bound=null(obj(
            cut_needed=null(BOOL),
            cut_share=NUM,
            goal_mfu=NUM,
            goal_ms=NUM,
            mfu=NUM,
            ms=NUM,
            no_room=null(BOOL),
            optimizer_floor_ms=NUM,
            rest_now_ms=null(NUM),
            room_ms=NUM)),
        gemm_share_of_peak=NUM,
        gemm_tflops=null(NUM),
        peak=STR,
        rung=STR)),
    ladder=arr(obj(adds=STR, rung=STR)),
    lease_minutes=INT,
    loss_bf16_cpu_max=NUM,
    loss_checked=null(INT),
    loss_max_rel_diff=null(NUM),
    loss_out_of_tolerance=null(arr(obj(
        context=INT,
        rel_diff=NUM,
        rung=STR,
        size=STR))),
    loss_rtol=NUM,
    loss_unchecked=null(INT),
    loss_unmasked=arr(NUM),
    not_measured=null(arr(STR)),
    optimizer_floor=null(obj(
        bandwidth_tb_s=NUM,
        billions=NUM,
        card=STR,
        floor_ms=NUM,
        gigabytes=NUM,
        over_floor=NUM)),
    peaks=arr(STR),
    planned=INT,
    profiles=null(arr(obj(
        busy_ms=opt(NUM),
        busy_share=opt(null(NUM)),
        context=INT,
        kinds_ms=opt(obj({
            'GEMM': NUM,
            'attention-softmax': NUM,
            'cast': NUM,
            'elementwise': NUM,
            'optimizer': NUM,
            'other': NUM})),
        rung=STR,
        size=STR,
        status=STR,
        step_ms=opt(NUM),
        unit=opt(STR)))),
    provenance=PROVENANCE,
    records=INT,
    rounds=null(INT),
    seed=INT,
    slower_than_anchor_at=null(arr(STR)),
    statuses=obj(
        error=INT,
        ok=INT,
        oom=null(INT),
        skipped=INT),
    steps=INT,
    unpaired_records=null(INT),
    warmup=INT,
)


class SummaryError(ValueError):
    pass


def check(ident: str, summary: dict, path: Path | str = "summary.json") -> None:
    """Raise ``SummaryError`` with one line naming the section, the file and the first key that is
    missing or of the wrong type, where ``summary`` does not fit section ``ident``'s schema."""
    schema = SCHEMAS.get(ident)
    if schema is None:
        return
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(summary))
    if error is None:
        return
    where = "d" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        what = f"lacks {where}.{missing}"
    elif error.validator == "type":
        what = f"{where} is {json.dumps(error.instance)[:60]}, not {error.validator_value!r}"
    else:
        what = f"{where}: {error.message[:120]}"
    raise SummaryError(f"writeup: section {ident}: {path} {what} "
                       "(schema: cs336_systems.report.summary_schemas)")
