-- matebot on PostgreSQL: the functions and triggers over schema.sql's tables. Every statement can
-- run again: a new database runs it after schema.sql, an upgrade after its upgrades/vN.sql steps.

-- SQLite's instr(), which the repositories' shared SQL uses: position of a text in another, 0 if absent.
CREATE OR REPLACE FUNCTION instr(haystack text, needle text) RETURNS integer LANGUAGE sql IMMUTABLE STRICT
    AS 'SELECT strpos(haystack, needle)';

-- A message stored moves its conversation's update time and, for what people said and the
-- answers, its count (as the SQLite trigger of the same name).
CREATE OR REPLACE FUNCTION mate_message_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE mate_conversation
    SET update_time = NEW.create_time,
        message_count = message_count + CASE WHEN NEW.role IN ('user', 'assistant') THEN 1 ELSE 0 END
    WHERE id = NEW.conversation_id;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tr_message_inserted ON mate_message;
CREATE TRIGGER tr_message_inserted AFTER INSERT ON mate_message
    FOR EACH ROW EXECUTE FUNCTION mate_message_inserted();

-- A message deleted or rewritten loses its vector (its key is the message id times two).
CREATE OR REPLACE FUNCTION mate_message_vector_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mate_embedding WHERE key = OLD.id * 2;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tr_embedding_message_delete ON mate_message;
CREATE TRIGGER tr_embedding_message_delete AFTER DELETE ON mate_message
    FOR EACH ROW EXECUTE FUNCTION mate_message_vector_gone();
DROP TRIGGER IF EXISTS tr_embedding_message_update ON mate_message;
CREATE TRIGGER tr_embedding_message_update AFTER UPDATE OF content, role, content_format ON mate_message
    FOR EACH ROW EXECUTE FUNCTION mate_message_vector_gone();

CREATE OR REPLACE FUNCTION mate_search_spaced(t text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT regexp_replace(normalize(COALESCE(t, ''), NFKC),
                          '([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])', ' \1 ', 'g')
$$;

-- The phrases OR-ed as one query (NULL for none): each phrase's words in order.
CREATE OR REPLACE FUNCTION mate_search_query(phrases text[]) RETURNS tsquery LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    found tsquery;
    part tsquery;
    phrase text;
BEGIN
    FOREACH phrase IN ARRAY COALESCE(phrases, '{}'::text[]) LOOP
        part := phraseto_tsquery('mate_words', mate_search_spaced(phrase));
        IF numnode(part) > 0 THEN
            found := CASE WHEN found IS NULL THEN part ELSE found || part END;
        END IF;
    END LOOP;
    RETURN found;
END $$;

CREATE OR REPLACE FUNCTION mate_search_date_words(t text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN t ~ '^\d{4}-\d{2}-\d{2}'
        THEN to_char(make_date(substr(t, 1, 4)::int, substr(t, 6, 2)::int, substr(t, 9, 2)::int),
                     'FMDD FMMonth YYYY FMDay')
        ELSE '' END
$$;

CREATE OR REPLACE FUNCTION mate_search_row(body text, prev text, day text, facts text DEFAULT NULL)
RETURNS TABLE (words tsvector, dates tsvector)
LANGUAGE sql STABLE AS $$
    SELECT setweight(to_tsvector('mate_words', mate_search_spaced(body)), 'A')
               || setweight(to_tsvector('mate_words', mate_search_spaced(prev)), 'B')
               || setweight(to_tsvector('mate_words', mate_search_spaced(facts)), 'C'),
           to_tsvector('mate_words', mate_search_date_words(day))
$$;

CREATE OR REPLACE FUNCTION mate_search_facts(message_id bigint) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT string_agg(f.fact, ' ' ORDER BY f.id) FROM mate_message_fact f WHERE f.message_id = $1
$$;

-- A group message without the "[Name] " the router stores before it.
CREATE OR REPLACE FUNCTION mate_search_without_speaker(t text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN left(t, 1) = '[' AND strpos(t, '] ') BETWEEN 2 AND 130 THEN substr(t, strpos(t, '] ') + 2)
                ELSE t END
$$;

-- (Re)index one message: what people said and the answers, in text, outside incognito. A
-- person's message carries the message before it when that was a person's too (a group's
-- back-and-forth), without its "[Name] " prefix.
CREATE OR REPLACE FUNCTION mate_search_index_message(message_id bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    m mate_message;
    before_text text;
    agent bigint;
BEGIN
    DELETE FROM mate_search WHERE key = message_id * 2;
    SELECT * INTO m FROM mate_message WHERE id = message_id;
    IF NOT FOUND OR m.role NOT IN ('user', 'assistant') OR m.content_format <> 'text'
       OR EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = m.conversation_id
                  AND m.id > i.after_message_id) THEN
        RETURN;
    END IF;
    IF m.role = 'user' THEN
        SELECT CASE WHEN p.role = 'user' THEN p.content END INTO before_text FROM mate_message p
        WHERE p.conversation_id = m.conversation_id AND p.id < m.id AND p.role IN ('user', 'assistant')
              AND p.content_format = 'text'
        ORDER BY p.id DESC LIMIT 1;
        before_text := mate_search_without_speaker(before_text);
    END IF;
    SELECT c.agent_id INTO agent FROM mate_conversation c WHERE c.id = m.conversation_id;
    INSERT INTO mate_search(key, agent_id, source, body, time, conversation_id, ref_id, filename, words, dates)
    SELECT m.id * 2, agent, 'conversations', m.content, m.create_time, m.conversation_id, m.id, NULL, r.words, r.dates
    FROM mate_search_row(m.content, before_text, m.create_time, mate_search_facts(m.id)) r;
END $$;

-- The message after `message_id` in its conversation (its "turn before" may have changed).
CREATE OR REPLACE FUNCTION mate_search_next_message(conversation text, message_id bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT n.id FROM mate_message n WHERE n.conversation_id = conversation AND n.id > message_id
    AND n.role IN ('user', 'assistant') AND n.content_format = 'text' ORDER BY n.id LIMIT 1
$$;

CREATE OR REPLACE FUNCTION mate_search_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    after_it bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM mate_search WHERE key = OLD.id * 2;
    ELSE
        PERFORM mate_search_index_message(NEW.id);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        after_it := mate_search_next_message(OLD.conversation_id, OLD.id);
        IF after_it IS NOT NULL THEN
            PERFORM mate_search_index_message(after_it);
        END IF;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tr_search_message_insert ON mate_message;
CREATE TRIGGER tr_search_message_insert AFTER INSERT ON mate_message
    FOR EACH ROW EXECUTE FUNCTION mate_search_message_changed();
DROP TRIGGER IF EXISTS tr_search_message_update ON mate_message;
CREATE TRIGGER tr_search_message_update AFTER UPDATE OF content, role, content_format ON mate_message
    FOR EACH ROW EXECUTE FUNCTION mate_search_message_changed();
DROP TRIGGER IF EXISTS tr_search_message_delete ON mate_message;
CREATE TRIGGER tr_search_message_delete AFTER DELETE ON mate_message
    FOR EACH ROW EXECUTE FUNCTION mate_search_message_changed();

CREATE OR REPLACE FUNCTION mate_search_fact_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM mate_search_index_message(CASE WHEN TG_OP = 'DELETE' THEN OLD.message_id ELSE NEW.message_id END);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tr_search_fact ON mate_message_fact;
CREATE TRIGGER tr_search_fact AFTER INSERT OR DELETE ON mate_message_fact
    FOR EACH ROW EXECUTE FUNCTION mate_search_fact_changed();

CREATE OR REPLACE FUNCTION mate_file_pieces() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM mate_file_piece WHERE file_id = OLD.id;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.content IS NOT DISTINCT FROM OLD.content AND NEW.filename IS NOT DISTINCT FROM OLD.filename
           AND NEW.deleted IS NOT DISTINCT FROM OLD.deleted AND NEW.agent_id IS NOT DISTINCT FROM OLD.agent_id THEN
            RETURN NULL;
        END IF;
        IF NEW.deleted = 0 AND OLD.deleted = 0 AND NEW.agent_id = OLD.agent_id AND NEW.filename = OLD.filename
           AND length(NEW.content) > length(OLD.content) AND left(NEW.content, length(OLD.content)) = OLD.content THEN
            INSERT INTO mate_file_piece(file_id, start, length, create_time)
            VALUES (NEW.id, length(OLD.content), length(NEW.content) - length(OLD.content), NEW.update_time);
            RETURN NULL;
        END IF;
        DELETE FROM mate_file_piece WHERE file_id = OLD.id;
    END IF;
    IF NEW.deleted = 0 AND length(NEW.content) > 0 THEN
        INSERT INTO mate_file_piece(file_id, start, length, create_time)
        VALUES (NEW.id, 0, length(NEW.content), NEW.update_time);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tr_piece_file ON mate_workspace_file;
CREATE TRIGGER tr_piece_file AFTER INSERT OR UPDATE OR DELETE ON mate_workspace_file
    FOR EACH ROW EXECUTE FUNCTION mate_file_pieces();

CREATE OR REPLACE FUNCTION mate_search_piece_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM mate_search WHERE key = OLD.id * 2 + 1;
        DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
        RETURN NULL;
    END IF;
    INSERT INTO mate_search(key, agent_id, source, body, time, conversation_id, ref_id, filename, words, dates)
    SELECT NEW.id * 2 + 1, f.agent_id, 'notes', p.body, NEW.create_time, NULL, f.id, f.filename, r.words, r.dates
    FROM mate_workspace_file f
    CROSS JOIN LATERAL (SELECT substr(f.content, NEW.start::int + 1, NEW.length::int) AS body) p
    CROSS JOIN LATERAL mate_search_row(p.body, NULL, NEW.create_time) r
    WHERE f.id = NEW.file_id;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS tr_piece_index ON mate_file_piece;
CREATE TRIGGER tr_piece_index AFTER INSERT OR DELETE ON mate_file_piece
    FOR EACH ROW EXECUTE FUNCTION mate_search_piece_changed();

-- The whole index made again from the messages and the live files, in bulk (after a copy
-- that wrote them with these triggers off): the same rows the triggers would have written.
CREATE OR REPLACE FUNCTION mate_search_rebuild() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mate_search;
    DELETE FROM mate_file_piece;
    INSERT INTO mate_search(key, agent_id, source, body, time, conversation_id, ref_id, filename, words, dates)
    SELECT m.id * 2, c.agent_id, 'conversations', m.content, m.create_time, m.conversation_id, m.id, NULL,
           r.words, r.dates
    FROM (SELECT t.*, lag(t.role) OVER w AS before_role, lag(t.content) OVER w AS before_text
          FROM mate_message t WHERE t.role IN ('user', 'assistant') AND t.content_format = 'text'
          WINDOW w AS (PARTITION BY t.conversation_id ORDER BY t.id)) m
    JOIN mate_conversation c ON c.id = m.conversation_id
    CROSS JOIN LATERAL mate_search_row(
        m.content,
        CASE WHEN m.role = 'user' AND m.before_role = 'user' THEN mate_search_without_speaker(m.before_text) END,
        m.create_time, mate_search_facts(m.id)) r
    WHERE NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = m.conversation_id
                      AND m.id > i.after_message_id);
    INSERT INTO mate_file_piece(file_id, start, length, create_time)
    SELECT id, 0, length(content), update_time FROM mate_workspace_file
    WHERE deleted = 0 AND length(content) > 0 ORDER BY id;
END $$;
