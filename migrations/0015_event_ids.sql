-- Event ids (issue 35): each change notification names itself, the same way on every instance,
-- so that a stream reconnecting with `Last-Event-ID` can be sent what it missed. The id is
-- `<transaction id>-<16 hex digits>`: the announcing transaction's id (txid_current(), 64 bits
-- with its epoch: never reused by this cluster) and the start of the SHA-256 of the change
-- itself, which tells a transaction's changes apart. Built from the change, not from a counter:
-- PostgreSQL folds a transaction's identical notifications into one, and still does (the same
-- change twice gets the same id), so no client sees a change more often than before. No row is
-- written: NOTIFY already gives the transaction its id.
--
-- The id travels in the notification as `event_id`, beside the five fields clients receive
-- (instances of the previous release ignore it). The checks and the payload are otherwise as in
-- 0001; every trigger calls this function, so each of them sends ids from now on.
CREATE OR REPLACE FUNCTION consoled_notify_change(p_type text, p_id bigint, p_op text,
                                                  p_project_id bigint DEFAULT NULL,
                                                  p_org_id bigint DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_change json;
BEGIN
    IF p_type IS NULL OR p_type NOT IN ('server', 'volume', 'floating_ip', 'elastic_ip', 'primary_ip',
            'network', 'nat_gateway', 'firewall', 'load_balancer', 'image', 'placement_group',
            'ssh_key', 'action', 'stack', 'api_token', 'project', 'ticket', 'wallet',
            'organization', 'membership', 'incident', 'user') THEN
        RAISE EXCEPTION 'consoled_notify_change: unknown type %', p_type USING ERRCODE = '22023';
    END IF;
    IF p_op IS NULL OR p_op NOT IN ('insert', 'update', 'delete') THEN
        RAISE EXCEPTION 'consoled_notify_change: unknown op %', p_op USING ERRCODE = '22023';
    END IF;
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'consoled_notify_change: id is required' USING ERRCODE = '22023';
    END IF;
    v_change := json_build_object('type', p_type, 'id', p_id, 'op', p_op,
                                'project_id', p_project_id, 'org_id', p_org_id);
    PERFORM pg_notify('consoled_change', json_build_object(
        'type', p_type, 'id', p_id, 'op', p_op,
        'project_id', p_project_id, 'org_id', p_org_id,
        'event_id', txid_current()::text || '-'
                    || left(encode(sha256(convert_to(v_change::text, 'UTF8')), 'hex'), 16))::text);
END
$$;
