/* Grouping of tensors into layers: the built-in rule, --group regex
 * override, explicit layer names, and the order of layers in a pack
 * (embeddings first, numbered blocks numerically, others by appearance). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "common/util.h"
#include "pack/writer.h"
#include "testlib.h"
#include "wspager.h"

static void group_is(const char *name, const char *regex, const char *want, const char *want_short)
{
	char buf[256];
	int rc = pack_group_name(name, regex, buf, sizeof(buf));
	if (rc < 0 || strcmp(buf, want) || strcmp(name + rc, want_short)) {
		fprintf(stderr, "%s (regex %s): group '%s' short '%s', want '%s' '%s'\n", name,
			regex ? regex : "-", rc < 0 ? "?" : buf, rc < 0 ? "?" : name + rc, want,
			want_short);
		exit(1);
	}
}

static const char *const names[] = {
	"model.layers.10.mlp.w", "model.embed_tokens.weight", "model.layers.2.attn.q",
	"model.norm.weight",     "model.layers.2.attn.k",     "lm_head.weight",
	"model.layers.1.mlp.w",  "scale",                      "model.layers.10.attn.q",
};

/* Writes a pack of the names above (U8 tensors of 3 bytes) and checks the
 * layer order and membership. */
static void check_pack_order(void)
{
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	char dir[600], msg[512];
	static const unsigned char data[3] = { 1, 2, 3 };
	uint64_t shape = 3;
	wsp_pack *pk;

	wspi_err_init(&err);
	wsp_convert_options_init(&opt);
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("group"));
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	for (size_t i = 0; i < WSP_ARRAY_SIZE(names); i++)
		CHECK_RC(pack_writer_add_tensor(pw, names[i], NULL, WSP_DTYPE_U8, 1, &shape, data, 3,
						0, 0, 0), 0);
	/* an explicit layer name wins over the rule */
	CHECK_RC(pack_writer_add_tensor(pw, "extra.thing", "model.layers.2", WSP_DTYPE_U8, 1, &shape,
					data, 3, 0, 0, 0), 0);
	/* the same name twice is refused at finish */
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);

	static const char *const want[] = { "model.embed_tokens", "model.layers.1", "model.layers.2",
					    "model.layers.10", "model.norm", "scale", "lm_head" };
	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	struct wsp_pack_summary s;
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_layers == WSP_ARRAY_SIZE(want));
	for (uint32_t i = 0; i < s.n_layers; i++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, i);
		if (strcmp(L->name, want[i])) {
			fprintf(stderr, "layer %u is %s, want %s\n", i, L->name, want[i]);
			exit(1);
		}
	}
	/* order of appearance inside a layer, short names relative to it */
	const struct wsp_layer *L2 = wsp_pack_find_layer(pk, "model.layers.2");
	CHECK(L2 && L2->n_tensors == 3);
	CHECK(!strcmp(L2->tensors[0].short_name, "attn.q"));
	CHECK(!strcmp(L2->tensors[1].short_name, "attn.k"));
	CHECK(!strcmp(L2->tensors[2].name, "extra.thing"));
	CHECK(!strcmp(L2->tensors[2].short_name, "extra.thing"));
	const struct wsp_tensor *sc = wsp_pack_find_tensor(pk, "scale");
	CHECK(sc && !strcmp(sc->short_name, "scale"));
	CHECK(wsp_pack_layer(pk, sc->layer) == wsp_pack_find_layer(pk, "scale"));
	wsp_pack_close(pk);

	/* duplicate tensor names fail with the name in the message */
	snprintf(dir + strlen(dir), 8, "2");
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "a.b", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "a.b", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0), 0);
	CHECK_RC(pack_writer_finish(pw), WSP_EFORMAT);
	CHECK(strstr(err.msg, "a.b"));
	pack_writer_free(pw);
	CHECK(access(dir, F_OK) != 0);

	/* a size that disagrees with shape x dtype is refused at once */
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "x", NULL, WSP_DTYPE_BF16, 1, &shape, data, 3, 0, 0, 0),
		 WSP_EFORMAT);
	CHECK(strstr(err.msg, "x"));
	CHECK_RC(pack_writer_add_tensor(pw, "", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0),
		 WSP_EFORMAT);
	CHECK_RC(pack_writer_add_tensor(pw, "bad\nname", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0,
					0), WSP_EFORMAT);
	CHECK_RC(pack_writer_add_tensor(pw, "y", NULL, 99, 1, &shape, data, 3, 0, 0, 0), WSP_EDTYPE);
	pack_writer_free(pw);
	CHECK(access(dir, F_OK) != 0);

	/* a --group regex applies to the pack as a whole */
	opt.group_regex = "^(enc|dec)\\.";
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "dec.x.w", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "enc.y.w", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "dec.z", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "other.w", NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0, 0, 0), 0);
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);
	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	CHECK(s.n_layers == 3);
	CHECK(!strcmp(wsp_pack_layer(pk, 0)->name, "dec"));
	CHECK(wsp_pack_layer(pk, 0)->n_tensors == 2);
	CHECK(!strcmp(wsp_pack_layer(pk, 1)->name, "enc"));
	CHECK(!strcmp(wsp_pack_layer(pk, 2)->name, "other"));
	CHECK(!strcmp(wsp_pack_find_tensor(pk, "dec.x.w")->short_name, "x.w"));
	wsp_pack_close(pk);

	opt.group_regex = "no capture";
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), -EINVAL);
	opt.group_regex = "(unclosed";
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), -EINVAL);
	CHECK(strstr(err.msg, "(unclosed"));
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

/* Writes `n` U8 tensors named `tn` with the options given and checks the
 * resulting layer names, in pack order. */
static void check_layers(const char *tag, const char *const *tn, size_t n,
			 const struct wsp_convert_options *opt, const char *const *want, size_t n_want)
{
	static const unsigned char data[3] = { 1, 2, 3 };
	uint64_t shape = 3;
	struct pack_writer *pw;
	struct wspi_err err;
	struct wsp_pack_summary s;
	char dir[600], msg[512];
	wsp_pack *pk;

	wspi_err_init(&err);
	snprintf(dir, sizeof(dir), "%s/p", t_scratch(tag));
	CHECK_RC(pack_writer_create(dir, opt, &pw, &err), 0);
	for (size_t i = 0; i < n; i++)
		CHECK_RC(pack_writer_add_tensor(pw, tn[i], NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0,
						0, 0), 0);
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);
	CHECK_RC(wsp_pack_open(dir, &pk, msg, sizeof(msg)), 0);
	CHECK_RC(wsp_pack_summary(pk, &s), 0);
	for (uint32_t i = 0; i < s.n_layers || i < n_want; i++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, i);
		if (i >= s.n_layers || i >= n_want || strcmp(L->name, want[i])) {
			fprintf(stderr, "%s: layer %u is %s, want %s\n", tag, i, L ? L->name : "-",
				i < n_want ? want[i] : "-");
			exit(1);
		}
	}
	wsp_pack_close(pk);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

/* Mixture-of-experts names (Mixtral's block_sparse_moe, Qwen/DeepSeek's
 * mlp.experts, shared experts): each routed expert is a layer of its own,
 * placed right after its block; router, attention and shared experts stay
 * with the block. */
static void check_experts(void)
{
	static const char *const tn[] = {
		"lm_head.weight",
		"model.layers.1.block_sparse_moe.experts.1.w1.weight",
		"model.layers.1.block_sparse_moe.experts.0.w1.weight",
		"model.layers.1.block_sparse_moe.gate.weight",
		"model.layers.0.mlp.experts.10.down_proj.weight",
		"model.layers.0.mlp.experts.2.down_proj.weight",
		"model.layers.0.mlp.shared_experts.up_proj.weight",
		"model.layers.0.self_attn.q_proj.weight",
		"model.embed_tokens.weight",
	};
	static const char *const want[] = {
		"model.embed_tokens", "model.layers.0", "model.layers.0.mlp.experts.2",
		"model.layers.0.mlp.experts.10", "model.layers.1",
		"model.layers.1.block_sparse_moe.experts.0", "model.layers.1.block_sparse_moe.experts.1",
		"lm_head",
	};
	struct wsp_convert_options opt;
	wsp_convert_options_init(&opt);
	check_layers("experts", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
}

/* Common schemes, with names sorted as the safetensors library writes them:
 * groups per block, and layers in the order a forward pass runs
 * (embeddings, encoder, decoder, head). */
static void check_schemes(void)
{
	struct wsp_convert_options opt;
	wsp_convert_options_init(&opt);
	{	/* T5 */
		static const char *const tn[] = {
			"decoder.block.0.layer.0.SelfAttention.q.weight",
			"decoder.block.1.layer.0.SelfAttention.q.weight",
			"decoder.final_layer_norm.weight",
			"encoder.block.0.layer.0.SelfAttention.q.weight",
			"encoder.block.0.layer.1.DenseReluDense.wi.weight",
			"encoder.block.1.layer.0.SelfAttention.q.weight",
			"encoder.final_layer_norm.weight",
			"lm_head.weight",
			"shared.weight",
		};
		static const char *const want[] = {
			"shared", "encoder.block.0", "encoder.block.1", "encoder.final_layer_norm",
			"decoder.block.0", "decoder.block.1", "decoder.final_layer_norm", "lm_head",
		};
		check_layers("t5", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
	{	/* BERT / ViT: layer.N, classifier after everything */
		static const char *const tn[] = {
			"bert.embeddings.word_embeddings.weight",
			"bert.encoder.layer.0.attention.self.query.weight",
			"bert.encoder.layer.1.attention.self.query.weight",
			"bert.encoder.layer.10.output.dense.weight",
			"bert.encoder.layer.2.output.dense.weight",
			"bert.pooler.dense.weight",
			"classifier.weight",
		};
		static const char *const want[] = {
			"bert.embeddings.word_embeddings", "bert.encoder.layer.0", "bert.encoder.layer.1",
			"bert.encoder.layer.2", "bert.encoder.layer.10", "bert.pooler.dense",
			"classifier",
		};
		check_layers("bert", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
	{	/* GPT-2: wte and wpe first although sorted last */
		static const char *const tn[] = {
			"h.0.attn.c_attn.weight", "h.1.attn.c_attn.weight", "ln_f.weight",
			"wpe.weight", "wte.weight",
		};
		static const char *const want[] = { "wpe", "wte", "h.0", "h.1", "ln_f" };
		check_layers("gpt2", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
	{	/* Whisper: the encoder's convolutions and positions, then its
		 * layers; the decoder's embeddings start the decoder */
		static const char *const tn[] = {
			"model.decoder.embed_positions.weight",
			"model.decoder.embed_tokens.weight",
			"model.decoder.layer_norm.weight",
			"model.decoder.layers.0.self_attn.q_proj.weight",
			"model.decoder.layers.1.self_attn.q_proj.weight",
			"model.encoder.conv1.weight",
			"model.encoder.conv2.weight",
			"model.encoder.embed_positions.weight",
			"model.encoder.layer_norm.weight",
			"model.encoder.layers.0.self_attn.q_proj.weight",
			"model.encoder.layers.1.fc1.weight",
			"proj_out.weight",
		};
		static const char *const want[] = {
			"model.encoder.conv1", "model.encoder.conv2", "model.encoder.embed_positions",
			"model.encoder.layers.0", "model.encoder.layers.1", "model.encoder.layer_norm",
			"model.decoder.embed_positions", "model.decoder.embed_tokens",
			"model.decoder.layers.0", "model.decoder.layers.1", "model.decoder.layer_norm",
			"proj_out",
		};
		check_layers("whisper", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
	{	/* diffusers UNet: a group per resnet, attention and resampler,
		 * down, mid, up, each resnet before its attention */
		static const char *const tn[] = {
			"conv_in.weight",
			"conv_norm_out.weight",
			"conv_out.weight",
			"down_blocks.0.attentions.0.proj_in.weight",
			"down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
			"down_blocks.0.attentions.1.proj_in.weight",
			"down_blocks.0.downsamplers.0.conv.weight",
			"down_blocks.0.resnets.0.conv1.weight",
			"down_blocks.0.resnets.0.conv2.weight",
			"down_blocks.0.resnets.1.conv1.weight",
			"down_blocks.1.resnets.0.conv1.weight",
			"mid_block.attentions.0.proj_in.weight",
			"mid_block.resnets.0.conv1.weight",
			"mid_block.resnets.1.conv1.weight",
			"time_embedding.linear_1.weight",
			"up_blocks.0.resnets.0.conv1.weight",
			"up_blocks.0.upsamplers.0.conv.weight",
			"up_blocks.1.attentions.0.proj_in.weight",
			"up_blocks.1.resnets.0.conv1.weight",
		};
		static const char *const want[] = {
			"conv_in", "time_embedding.linear_1",
			"down_blocks.0.resnets.0", "down_blocks.0.attentions.0",
			"down_blocks.0.resnets.1", "down_blocks.0.attentions.1",
			"down_blocks.0.downsamplers.0", "down_blocks.1.resnets.0",
			"mid_block.resnets.0", "mid_block.attentions.0", "mid_block.resnets.1",
			"up_blocks.0.resnets.0", "up_blocks.0.upsamplers.0",
			"up_blocks.1.resnets.0", "up_blocks.1.attentions.0",
			"conv_norm_out", "conv_out",
		};
		check_layers("unet", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
	{	/* DiT (diffusers): transformer blocks in order */
		static const char *const tn[] = {
			"norm_out.linear.weight", "pos_embed.proj.weight", "proj_out.weight",
			"transformer_blocks.0.attn.to_q.weight", "transformer_blocks.1.attn.to_q.weight",
			"transformer_blocks.10.ff.net.0.proj.weight",
		};
		static const char *const want[] = {
			"pos_embed.proj", "transformer_blocks.0", "transformer_blocks.1",
			"transformer_blocks.10", "norm_out.linear", "proj_out",
		};
		check_layers("dit", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
	{	/* Llama: the final norm before lm_head */
		static const char *const tn[] = {
			"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
			"model.norm.weight",
		};
		static const char *const want[] = { "model.embed_tokens", "model.layers.0", "model.norm",
						    "lm_head" };
		check_layers("llama", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	}
}

/* wsp_convert_options.group_map: explicit layers first, in the map's order;
 * the rest by the rule; bad maps refused before anything is written. */
static void check_group_map(void)
{
	static const char *const tn[] = { "a.w", "b.w", "c.w", "model.layers.0.x", "trunk.w" };
	static const char *const map[] = {
		"trunk.w", "trunk", "c.w", "head.c", "a.w", "head.a", "b.w", "head.c", NULL,
	};
	static const char *const want[] = { "trunk", "head.c", "head.a", "model.layers.0" };
	struct wsp_convert_options opt;
	struct pack_writer *pw;
	struct wspi_err err;
	char dir[600];

	wsp_convert_options_init(&opt);
	opt.group_map = map;
	check_layers("group-map", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));
	/* inside a layer: the map's order (c.w before b.w), not the declaration's */
	{
		static const unsigned char data[3] = { 1, 2, 3 };
		uint64_t shape = 3;
		char d2[600], msg[512];
		wsp_pack *pk;
		wspi_err_init(&err);
		snprintf(d2, sizeof(d2), "%s/p", t_scratch("group-map-order"));
		CHECK_RC(pack_writer_create(d2, &opt, &pw, &err), 0);
		for (size_t i = 0; i < WSP_ARRAY_SIZE(tn); i++)
			CHECK_RC(pack_writer_add_tensor(pw, tn[i], NULL, WSP_DTYPE_U8, 1, &shape, data, 3,
							0, 0, 0), 0);
		CHECK_RC(pack_writer_finish(pw), 0);
		pack_writer_free(pw);
		CHECK_RC(wsp_pack_open(d2, &pk, msg, sizeof(msg)), 0);
		const struct wsp_layer *hc = wsp_pack_find_layer(pk, "head.c");
		CHECK(hc && hc->n_tensors == 2);
		CHECK(!strcmp(hc->tensors[0].name, "c.w") && !strcmp(hc->tensors[1].name, "b.w"));
		wsp_pack_close(pk);
		wspi_err_destroy(&err);
		*strrchr(d2, '/') = '\0';
		t_rmrf(d2);
	}

	wspi_err_init(&err);
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("group-map-bad"));
	static const char *const twice[] = { "a.w", "x", "a.w", "y", NULL };
	opt.group_map = twice;
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), -EINVAL);
	CHECK(strstr(err.msg, "a.w is mapped twice"));
	static const char *const odd[] = { "a.w", "x", "b.w", NULL };
	opt.group_map = odd;
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), -EINVAL);
	CHECK(strstr(err.msg, "b.w has no layer"));
	static const char *const empty[] = { "a.w", "", NULL };
	opt.group_map = empty;
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), -EINVAL);
	CHECK(access(dir, F_OK) != 0);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

/* wsp_convert_options.layer_order: its layers first, in its order (a name
 * given twice keeps its first place), then group_map's, then the rule's;
 * a name no layer has is WSP_ENOTFOUND and leaves no pack. */
static void check_layer_order(void)
{
	static const char *const tn[] = {
		"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
		"model.layers.1.mlp.up_proj.weight", "model.norm.weight", "trunk.w",
	};
	static const char *const order[] = { "model.layers.1", "lm_head", "model.layers.1", NULL };
	static const char *const map[] = { "trunk.w", "trunk", NULL };
	static const char *const want[] = {
		"model.layers.1", "lm_head", "trunk", "model.embed_tokens", "model.layers.0",
		"model.norm",
	};
	struct wsp_convert_options opt;
	wsp_convert_options_init(&opt);
	opt.layer_order = order;
	opt.group_map = map;
	check_layers("layer-order", tn, WSP_ARRAY_SIZE(tn), &opt, want, WSP_ARRAY_SIZE(want));

	static const unsigned char data[3] = { 1, 2, 3 };
	static const char *const bad[] = { "lm_head", "model.layers.7", NULL };
	uint64_t shape = 3;
	struct pack_writer *pw;
	struct wspi_err err;
	char dir[600];
	wspi_err_init(&err);
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("layer-order-bad"));
	opt.layer_order = bad;
	CHECK_RC(pack_writer_create(dir, &opt, &pw, &err), 0);
	for (size_t i = 0; i < WSP_ARRAY_SIZE(tn); i++)
		CHECK_RC(pack_writer_add_tensor(pw, tn[i], NULL, WSP_DTYPE_U8, 1, &shape, data, 3, 0,
						0, 0), 0);
	CHECK_RC(pack_writer_finish(pw), WSP_ENOTFOUND);
	CHECK(strstr(err.msg, "\"model.layers.7\""));
	pack_writer_free(pw);
	CHECK(access(dir, F_OK) != 0);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
}

int main(void)
{
	group_is("model.layers.3.block_sparse_moe.experts.7.w1.weight", NULL,
		 "model.layers.3.block_sparse_moe.experts.7", "w1.weight");
	group_is("model.layers.3.mlp.experts.12.gate_proj.weight", NULL,
		 "model.layers.3.mlp.experts.12", "gate_proj.weight");
	group_is("model.layers.3.mlp.shared_experts.gate_proj.weight", NULL, "model.layers.3",
		 "mlp.shared_experts.gate_proj.weight");
	group_is("model.layers.3.block_sparse_moe.gate.weight", NULL, "model.layers.3",
		 "block_sparse_moe.gate.weight");
	group_is("experts.3.w", NULL, "experts.3", "w");   /* outside a block: the plain rule */
	group_is("model.layers.7.mlp.up_proj.weight", NULL, "model.layers.7", "mlp.up_proj.weight");
	group_is("transformer.h.10.attn.c_attn.weight", NULL, "transformer.h.10", "attn.c_attn.weight");
	group_is("h.3.attn.w", NULL, "h.3", "attn.w");
	group_is("blocks.0.norm", NULL, "blocks.0", "norm");
	group_is("vision.blocks.12.x", NULL, "vision.blocks.12", "x");
	group_is("model.embed_tokens.weight", NULL, "model.embed_tokens", "weight");
	group_is("lm_head.weight", NULL, "lm_head", "weight");
	group_is("scale", NULL, "scale", "scale");
	group_is("model.layers.x.w", NULL, "model.layers.x", "w");
	group_is("model.layers.3", NULL, "model.layers", "3");     /* no component after N */
	group_is("my_layers.3.w", NULL, "my_layers.3", "w");        /* whole-word match only */
	group_is("enc.blocks.1.w", "^(enc)\\.", "enc", "blocks.1.w");
	group_is("dec.blocks.1.w", "^(enc)\\.", "dec.blocks.1", "w"); /* no match: built-in */
	group_is("a.b.c", "(b)", "b", "a.b.c");                      /* not a prefix: full name */
	char small[4];
	CHECK_RC(pack_group_name("model.layers.1.w", NULL, small, sizeof(small)), WSP_ETOOBIG);
	CHECK_RC(pack_group_name("x", "(", small, sizeof(small)), -EINVAL);
	check_pack_order();
	check_experts();
	check_schemes();
	check_group_map();
	check_layer_order();
	return 0;
}
